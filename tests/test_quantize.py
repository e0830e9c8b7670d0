"""`localrun quantize` through the real CLI: the bundled SmolLM2 (Q4_1) requantized by llama.cpp in a
child process, the result in the store with its origin, served and generating through a real daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from localrun.store import Store
from localrun.store.scratch import scratch_file
from tests.cli import run_cli
from tests.daemon import start_daemon
from tests.tiny_gguf import write_tiny_gguf

SOURCE = "smollm2:135m"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A store holding the bundled model and its Q8_0 and Q4_0 quantizations (made once for the module)."""
    home = tmp_path_factory.mktemp("quantize-home")
    env = {"LOCALRUN_HOME": str(home)}
    assert run_cli("pull", "smollm2", "--quiet", env=env).returncode == 0
    for name, type_ in (("smollm2:q8", "Q8_0"), ("smollm2:q4", "q4_0")):
        done = run_cli("quantize", "smollm2", name, "--type", type_, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"quantized {SOURCE} to {name} ({type_.upper()}, ")
        assert done.stderr.count("warning: smollm2:135m is already quantized (Q4_1)") == 1
    return home


def _models(home) -> dict[str, dict]:
    listed = run_cli("list", "--json", env={"LOCALRUN_HOME": str(home)})
    return {m["name"]: m for m in json.loads(listed.stdout)}


def test_results_are_listed_with_their_quantization(home):
    listing = run_cli("list", env={"LOCALRUN_HOME": str(home)}).stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in listing[1:]}
    assert rows["smollm2:q8"][4] == "Q8_0" and rows["smollm2:q4"][4] == "Q4_0"
    models = _models(home)
    assert models["smollm2:q8"]["size"] > models[SOURCE]["size"] > models["smollm2:q4"]["size"]


def test_manifest_records_the_origin(home):
    models = _models(home)
    for name, type_ in (("smollm2:q8", "Q8_0"), ("smollm2:q4", "Q4_0")):
        assert models[name]["origin"] == {"model": SOURCE, "digest": models[SOURCE]["digest"], "type": type_}
        assert models[name]["source"] == f"quantize:{SOURCE}"
        assert models[name]["defaults"] == models[SOURCE]["defaults"]
    assert models[SOURCE]["origin"] == {}
    shown = run_cli("show", "smollm2:q4", env={"LOCALRUN_HOME": str(home)}).stdout
    assert f"quantized from    {SOURCE} ({models[SOURCE]['digest'][7:19]})" in shown
    assert not list((home / "models" / "partial").glob("*.partial"))


def test_quantized_models_load_and_generate(home):
    """Made by `localrun quantize`, and by Ollama's /api/create with `quantize` (as `ollama create -q`)."""
    daemon = start_daemon(home, {"LOCALRUN_PARALLEL": "1", "LOCALRUN_CTX_SIZE": "512"}, pull=False)
    try:
        lines = httpx.post(f"{daemon.url}/api/create", timeout=120, json={
            "model": "served:q8", "from": "smollm2", "quantize": "q8_0", "system": "Be brief."}).text.splitlines()
        statuses = [json.loads(line)["status"] for line in lines]
        assert "quantizing Q4_1 model to Q8_0" in statuses and statuses[-1] == "success", lines
        assert any(s.startswith("warning: smollm2:135m is already quantized (Q4_1)") for s in statuses)
        shown = httpx.post(f"{daemon.url}/api/show", json={"model": "served:q8"}, timeout=30).json()
        assert shown["details"]["quantization_level"] == "Q8_0" and shown["system"] == "Be brief."
        for name in ("smollm2:q8", "smollm2:q4", "served:q8"):
            body = {"model": name, "messages": [{"role": "user", "content": "Name a colour."}],
                    "max_tokens": 8, "temperature": 0}
            answer = httpx.post(f"{daemon.url}/v1/chat/completions", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
            assert answer.json()["usage"]["completion_tokens"] > 0
            assert answer.json()["choices"][0]["message"]["content"].strip()
        refused = httpx.post(f"{daemon.url}/api/create", timeout=60, json={
            "model": "served:bad", "from": "smollm2", "quantize": "Q9_9", "stream": False})
        assert refused.status_code == 400 and "unknown quantization type 'Q9_9'" in refused.json()["error"]
    finally:
        daemon.stop()


def test_create_with_quantize_makes_the_file_of_quantize_with_the_modelfiles_settings(home, tmp_path):
    env = {"LOCALRUN_HOME": str(home)}
    (tmp_path / "Modelfile").write_text("FROM smollm2\nSYSTEM Be brief.\nPARAMETER temperature 0\n")
    made = run_cli("create", "brief:q8", "-f", str(tmp_path / "Modelfile"), "--quantize", "q8_0", env=env)
    assert made.returncode == 0 and made.stderr.startswith("warning: smollm2:135m is already quantized"), made.stderr
    assert made.stdout.startswith("created brief:q8 (") and made.stdout.endswith(", Q8_0 of smollm2)\n")
    models = _models(home)
    brief = models["brief:q8"]
    assert brief["digest"] == models["smollm2:q8"]["digest"]  # llama.cpp's quantizer is deterministic
    assert brief["system"] == "Be brief." and brief["defaults"] == {"temperature": 0.0}
    assert brief["origin"] == {"model": SOURCE, "digest": models[SOURCE]["digest"], "type": "Q8_0"}
    bad = run_cli("create", "brief:bad", "-f", str(tmp_path / "Modelfile"), "--quantize", "Q9_9", env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown quantization type 'Q9_9'")
    assert "brief:bad" not in _models(home) and not list((home / "models" / "partial").glob("*.partial"))
    for seed in (1, 2):  # FROM a file: imported under the name before it is quantized
        write_tiny_gguf(tmp_path / f"tiny{seed}.gguf", seed=seed)
        (tmp_path / f"Tiny{seed}").write_text(f"FROM ./tiny{seed}.gguf\n")
    assert run_cli("create", "only-one", "-f", str(tmp_path / "Tiny1"), env=env).returncode == 0
    only_one = _models(home)["only-one:latest"]  # the only model with that file
    bad = run_cli("create", "only-one", "-f", str(tmp_path / "Tiny2"), "--quantize", "Q9_9", env=env)
    assert bad.returncode == 2 and _models(home)["only-one:latest"] == only_one  # as it was, its file too
    assert Path(only_one["path"]).is_file()


def test_unknown_type_is_a_usage_error(home):
    done = run_cli("quantize", "smollm2", "smollm2:bad", "--type", "Q9_9", env={"LOCALRUN_HOME": str(home)})
    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown quantization type 'Q9_9'; choose one of ")
    assert len(done.stderr.splitlines()) == 1 and "Q4_K_M" in done.stderr and "Traceback" not in done.stderr


def test_a_type_the_source_cannot_take_is_one_line(home):
    done = run_cli("quantize", "smollm2", "smollm2:iq", "--type", "IQ2_XXS", env={"LOCALRUN_HOME": str(home)})
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "error: cannot quantize to IQ2_XXS: this quantization requires an imatrix!"
    assert "smollm2:iq" not in _models(home)
    assert not list((home / "models" / "partial").glob("*.partial"))


def test_missing_source_exits_1():
    done = run_cli("quantize", "nosuch", "nosuch:q4", "--type", "Q4_0")
    assert done.returncode == 1
    assert done.stderr.startswith("error: model 'nosuch' is not pulled")
    assert len(done.stderr.splitlines()) == 1


def test_bad_destination_name_is_refused_before_work(home):
    done = run_cli("quantize", "smollm2", "Bad Name!", "--type", "Q4_0", env={"LOCALRUN_HOME": str(home)})
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1


def test_json_reports_tensor_progress_and_the_result(home):
    done = run_cli("quantize", "smollm2", "smollm2:q8json", "--type", "Q8_0", "--json", env={"LOCALRUN_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    tensors = [e for e in events if e["event"] == "tensor"]
    assert [e["index"] for e in tensors] == list(range(1, tensors[0]["total"] + 1))
    assert events[-1]["event"] == "success" and events[-1]["model"]["quantization"] == "Q8_0"


def test_ctrl_c_leaves_nothing_behind(home):
    env = {**os.environ, "LOCALRUN_HOME": str(home)}
    cli = subprocess.Popen([sys.executable, "-m", "localrun", "quantize", "smollm2", "smollm2:cut", "--type", "Q6_K",
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)
    for line in cli.stdout:  # interrupt at the first tensor: the child is still quantizing
        if json.loads(line).get("event") == "tensor":
            break
    os.killpg(cli.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
    cli.communicate(timeout=60)
    assert cli.returncode == 130
    assert not list((home / "models" / "partial").glob("*.partial"))
    assert "smollm2:cut" not in _models(home)


def test_a_cli_killed_outright_takes_its_quantizer_along_and_the_next_one_sweeps_its_file(home):
    env = {**os.environ, "LOCALRUN_HOME": str(home)}
    cli = subprocess.Popen([sys.executable, "-m", "localrun", "quantize", "smollm2", "smollm2:killed", "--type",
                            "Q6_K", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                           start_new_session=True)
    for line in cli.stdout:  # the child is quantizing
        if json.loads(line).get("event") == "tensor":
            break
    child = next(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent_of(p) == cli.pid)
    cli.kill()  # SIGKILL to the CLI alone: no Ctrl-C reaches the child, no cleanup runs
    cli.wait()
    deadline = time.monotonic() + 30
    while _parent_of(Path(f"/proc/{child}")):  # gone at once, or (without the death signal) once it is done
        assert time.monotonic() < deadline, "the quantizer outlived its parent"
        time.sleep(0.05)
    left_size = next((home / "models" / "partial").glob("quantize-*.partial")).stat().st_size
    partial = home / "models" / "partial"
    (left,) = partial.glob("quantize-*.partial")  # left behind: nobody was there to delete it
    done = run_cli("quantize", "smollm2", "smollm2:swept", "--type", "Q6_K", "--json", env={"LOCALRUN_HOME": str(home)})
    assert done.returncode == 0 and not list(partial.glob("*.partial"))  # the next quantization swept it
    assert left_size < json.loads(done.stdout.splitlines()[-1])["model"]["size"]  # cut short, not finished


def _parent_of(proc: Path) -> int:
    """The parent pid in /proc/PID/stat; 0 once the process is gone (or a zombie nobody waits for)."""
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return 0
    state, parent = stat.rsplit(")", 1)[1].split()[:2]
    return 0 if state == "Z" else int(parent)


def test_import_file_moves_a_scratch_file_in_and_copy_keeps_the_origin(smollm2_path):
    store = Store()
    with scratch_file(store.layout, "quantize") as partial:
        partial.write_bytes(smollm2_path.read_bytes())
        model = store.import_file(partial, "made:one", source="test", origin={"model": "x", "type": "Q4_1"},
                                  defaults={"num_ctx": 1024})
        assert not partial.exists() and model.path.is_file()
    assert model.origin == {"model": "x", "type": "Q4_1"} and model.defaults == {"num_ctx": 1024}
    assert store.copy("made:one", "made:two").origin == model.origin
    assert store.resolve("made:two").origin == model.origin
    copied = store.import_file(smollm2_path, "made:three", source="test")
    assert smollm2_path.is_file() and copied.digest == model.digest and copied.origin == {}
