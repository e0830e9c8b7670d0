"""Settings are parsed and checked once, from one table: typed values, one error line naming the
variable and what it accepts, and one engine-settings type that crosses to the runner as JSON."""

from __future__ import annotations

import json

import pytest

from localrun.config import SETTINGS, EngineSettings, Settings, read
from localrun.errors import UsageError
from tests.cli import run_cli


def test_every_setting_becomes_a_typed_value():
    s = Settings.from_env({"LOCALRUN_THREADS": "3", "LOCALRUN_GPU_LAYERS": "0", "LOCALRUN_KEEP_ALIVE": "1h30m",
                           "LOCALRUN_MEMORY_BUDGET": "8GiB", "LOCALRUN_MAX_BODY": "1MiB", "LOCALRUN_SPECULATIVE": "on",
                           "LOCALRUN_API_KEY": "a, b", "LOCALRUN_KV_CACHE_TYPE": "Q8_0", "LOCALRUN_DEBUG": "1",
                           "LOCALRUN_EMBED_CTX_SIZE": "512"})
    assert (s.engine.threads, s.engine.gpu_layers, s.engine.speculative, s.engine.kv_cache_type) == (3, 0, 16, "q8_0")
    assert s.engine.embed_ctx_size == 512
    assert (s.keep_alive, s.memory_budget, s.max_body, s.api_keys, s.debug) == (5400.0, 8 * 2**30, 2**20, ("a", "b"), True)


def test_defaults_are_the_engine_settings_defaults():
    s = Settings.from_env({})
    assert s.engine == EngineSettings()
    assert (s.engine.threads, s.engine.gpu_layers, s.keep_alive, s.max_body, s.debug) == (None, None, 300.0, 32 * 2**20,
                                                                                          False)
    shown = {setting.env: setting.default for setting in SETTINGS}
    assert (shown["LOCALRUN_PARALLEL"], shown["LOCALRUN_THREADS"], shown["LOCALRUN_SPECULATIVE"]) == ("4", "auto", "off")


@pytest.mark.parametrize("env, value, accepts", [
    ("LOCALRUN_THREADS", "abc", "auto or an integer of at least 1"),
    ("LOCALRUN_THREADS", "0", "auto or an integer of at least 1"),
    ("LOCALRUN_GPU_LAYERS", "lots", "auto or a number of layers"),
    ("LOCALRUN_PARALLEL", "-3", "an integer of at least 1"),
    ("LOCALRUN_CTX_SIZE", "4", "an integer of at least 8"),
    ("LOCALRUN_EMBED_CTX_SIZE", "none", "an integer of at least 8"),
    ("LOCALRUN_KEEP_ALIVE", "soon", "a duration such as 5m"),
    ("LOCALRUN_MEMORY_BUDGET", "lots", "a size in bytes or with a unit"),
    ("LOCALRUN_MAX_BODY", "12XB", "a size in bytes or with a unit"),
    ("LOCALRUN_MAX_QUEUE", "-1", "an integer of at least 0"),
    ("LOCALRUN_FLASH_ATTN", "maybe", "one of auto, on, off"),
    ("LOCALRUN_SPECULATIVE", "99", "off, on or a draft length from 0 to 64"),
])
def test_a_bad_value_names_its_variable_and_what_it_accepts(env, value, accepts):
    with pytest.raises(UsageError) as caught:
        Settings.from_env({env: value})
    message = caught.value.message
    assert message.startswith(f"{env} must be ") and accepts in message and message.endswith(f"got {value!r}")


def test_a_flag_that_overrides_a_setting_is_named_in_its_error():
    with pytest.raises(UsageError, match=r"^--gpu-layers must be auto or a number of layers, got 'x'$"):
        Settings.from_env({}, flags={"LOCALRUN_GPU_LAYERS": ("--gpu-layers", "x")})
    s = Settings.from_env({"LOCALRUN_GPU_LAYERS": "lots"}, flags={"LOCALRUN_GPU_LAYERS": ("--gpu-layers", "2")})
    assert s.engine.gpu_layers == 2


def test_engine_settings_cross_to_the_runner_as_json_and_back():
    settings = EngineSettings(parallel=2, ctx_size=512, threads=3, kv_cache_type="q8_0", flash_attn="on", seed=7,
                              speculative=8, safe_mode=True)
    assert EngineSettings.from_json(settings.to_json()) == settings
    assert EngineSettings.from_json("{}") == EngineSettings()


@pytest.mark.parametrize("fields, message", [
    ({"parallel": 0}, "parallel must be an integer of at least 1, got 0"),
    ({"threads": 0}, "threads must be auto or an integer of at least 1, got 0"),
    ({"speculative": 65}, "speculative must be off, on or a draft length from 0 to 64, got 65"),
    ({"kv_cache_type": "q5"}, "kv_cache_type must be one of f16, q8_0, q4_0, got 'q5'"),
    ({"kv_cache_type": "q4_0", "flash_attn": "off"}, "a q4_0 KV cache needs flash attention"),
])
def test_engine_settings_are_checked_by_the_same_rules_however_they_are_built(fields, message):
    with pytest.raises(UsageError, match=message):
        EngineSettings(**fields)
    with pytest.raises(UsageError, match=message):
        EngineSettings.from_json(json.dumps(fields))


def test_one_setting_is_read_alone_through_the_same_rule():
    assert read("LOCALRUN_DEBUG", {"LOCALRUN_DEBUG": "false"}) is False
    assert read("LOCALRUN_HOME", {"LOCALRUN_HOME": "~/x"}).name == "x"
    assert read("LOCALRUN_HOME", {}) is None
    with pytest.raises(UsageError, match="LOCALRUN_MAX_INPUTS must be an integer of at least 1, got 'many'"):
        read("LOCALRUN_MAX_INPUTS", {"LOCALRUN_MAX_INPUTS": "many"})


@pytest.mark.parametrize("env", [{"LOCALRUN_THREADS": "abc"}, {"LOCALRUN_GPU_LAYERS": "lots"},
                                 {"LOCALRUN_PARALLEL": "-3"}, {"LOCALRUN_KEEP_ALIVE": "soon"},
                                 {"LOCALRUN_MEMORY_BUDGET": "8 bananas"}])
def test_serve_stops_with_exit_2_and_one_line_on_a_bad_setting(env):
    done = run_cli("serve", "--port", "1", env=env, timeout=60)
    [variable] = env
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.splitlines()[-1]]
    assert done.stderr.startswith(f"error: {variable} must be ")
