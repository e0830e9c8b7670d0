"""`localrun pull/list/show/rm/cp` through the real entry point: output, exit codes, error lines,
and real processes: a pull killed with SIGKILL resumes, two pulls at once download once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from localrun.cli import main
from tests.cli import run_cli
from tests.fileserver import FileServer
from tests.tiny_gguf import write_tiny_gguf


def run(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process through `main()` (the real error boundary); returns (code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["localrun", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def localrun(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "localrun", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture
def tiny(tmp_path):
    return write_tiny_gguf(tmp_path / "Tiny.gguf", floats=8192)


@pytest.fixture
def server():
    with FileServer() as s:
        yield s


def test_pull_on_a_pipe_prints_only_the_final_line(tiny):
    proc = localrun("pull", str(tiny))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.startswith("pulled tiny:latest (") and out.count("\n") == 1
    assert "\x1b" not in out + err and err == ""


def test_pull_json_lines(capsys, monkeypatch, tiny):
    code, out, err = run(capsys, monkeypatch, "pull", str(tiny), "--json")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and err == ""
    assert events[0] == {"status": "pulling manifest"} and events[-1]["status"] == "success"
    assert events[-1]["model"]["name"] == "tiny:latest"
    assert {"verifying sha256 digest", "writing manifest"} <= {e["status"] for e in events}


def test_list_show_cp_rm(capsys, monkeypatch, tiny):
    run(capsys, monkeypatch, "pull", str(tiny), "--quiet")
    code, out, _ = run(capsys, monkeypatch, "cp", "tiny", "copy:v1")
    assert (code, out) == (0, "copied tiny to copy:v1\n")
    code, out, _ = run(capsys, monkeypatch, "list")
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "QUANT", "PARAMS", "MODIFIED"]
    assert [r.split()[0] for r in rows] == ["copy:v1", "tiny:latest"] and "F32" in rows[0]
    code, out, _ = run(capsys, monkeypatch, "list", "--json")
    assert [m["name"] for m in json.loads(out)] == ["copy:v1", "tiny:latest"]
    code, out, _ = run(capsys, monkeypatch, "show", "tiny")
    assert "architecture      llama" in out and "context length    256" in out and "'<s>'" in out
    assert run(capsys, monkeypatch, "show", "tiny", "--template")[1] == "{{ messages }}\n"
    assert run(capsys, monkeypatch, "show", "tiny", "--license")[1] == "apache-2.0\n"
    assert "general.name = 'tiny'" in run(capsys, monkeypatch, "show", "tiny", "--metadata")[1]
    shown = json.loads(run(capsys, monkeypatch, "show", "tiny", "--json")[1])
    assert shown["embedding_length"] == 8 and shown["special_tokens"]["eos"] == "</s>"
    code, out, _ = run(capsys, monkeypatch, "rm", "tiny", "copy:v1")
    assert (code, out) == (0, "deleted tiny\ndeleted copy:v1\n")
    assert run(capsys, monkeypatch, "list")[1].split() == header.split()  # only the header is left


def test_show_template_says_which_template_a_model_without_one_gets(capsys, monkeypatch, tmp_path):
    run(capsys, monkeypatch, "pull", str(write_tiny_gguf(tmp_path / "bare.gguf", template="")), "--quiet")
    code, out, err = run(capsys, monkeypatch, "show", "bare", "--template")
    assert (code, out) == (0, "")
    assert err == ("this model has no chat template in its GGUF metadata; its chats are rendered with llama.cpp's "
                   "built-in template for its architecture (llama), or ChatML when llama.cpp has none\n")


def test_cp_onto_another_model_needs_force(capsys, monkeypatch, tmp_path):
    for seed in (1, 2):
        run(capsys, monkeypatch, "pull", str(write_tiny_gguf(tmp_path / f"m{seed}.gguf", seed=seed)), "--quiet")
    code, out, err = run(capsys, monkeypatch, "cp", "m1", "m2")
    assert (code, out) == (2, "") and err.startswith("error: m2:latest already names another model (")
    assert err.count("\n") == 1 and "--force" in err
    assert run(capsys, monkeypatch, "cp", "m1", "m2", "--force")[:2] == (0, "copied m1 to m2:latest\n")
    code, out, err = run(capsys, monkeypatch, "quantize", "m1", "m2", "--type", "Q8_0")  # refused before any work
    assert (code, out) == (2, "") and err.startswith("error: m2:latest already names another model (")


@pytest.mark.parametrize("args,code,pattern", [
    (["pull", "smollm3"], 1, "error: model 'smollm3' is not in the catalogue; did you mean smollm"),
    (["show", "tiny"], 1, "error: model 'tiny' is not pulled, and the catalogue has no such model"),
    (["show", "smolm2"], 1, "error: model 'smolm2' is not pulled; did you mean smollm2"),
    (["rm", "nothing"], 1, "error: model 'nothing' is not pulled ("),
    (["pull", "ftp://foo/x.gguf"], 2, "error: unsupported URL scheme 'ftp' in 'ftp://foo/x.gguf'"),
    (["pull", "/usr/"], 2, "error: /usr is a directory; pull takes one .gguf file"),
    (["pull", "bad:name:here"], 2, "error: invalid model name"),
    (["pull", "smollm2", "--link"], 2, "error: --link works only with a local file"),
    (["cp", "nothing", "x"], 1, "error: model 'nothing' is not pulled"),
])
def test_errors_are_one_line(capsys, monkeypatch, args, code, pattern):
    got, out, err = run(capsys, monkeypatch, *args)
    assert got == code and out == ""
    assert err.startswith(pattern) and err.count("\n") == 1, err


def test_download_errors_are_one_line(capsys, monkeypatch, server, tiny, tmp_path):
    good = server.add("/ok.gguf", tiny.read_bytes(), etag=True)
    server.fault("/ok.gguf", corrupt=True)
    html = server.add("/page.gguf", tiny.read_bytes())
    server.fault("/page.gguf", html=True)
    cases = [(server.url("/missing.gguf"), "not found (HTTP 404)"), (good, "checksum mismatch"),
             (html, "not a GGUF file"), (str(tmp_path / "none.gguf"), "no such file")]
    for ref, message in cases:
        code, out, err = run(capsys, monkeypatch, "pull", ref, "--quiet")
        assert code == 1 and out == "" and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_sigkill_mid_download_then_pull_again_resumes(server, tmp_path, localrun_home):
    data = write_tiny_gguf(tmp_path / "Big.gguf", floats=4 << 20).read_bytes()  # 16 MiB, 1 MiB per 0.1 s
    url = server.add("/Big.gguf", data)
    server.fault("/Big.gguf", slow=0.1)
    proc = localrun("pull", url)
    partials = localrun_home / "models" / "partial"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(p.stat().st_size for p in partials.glob("*.partial")) < 3 << 20:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    (partial,) = partials.glob("*.partial")
    kept = partial.stat().st_size
    assert 0 < kept < len(data) and not list((localrun_home / "models").glob("blobs/*"))
    again = localrun("pull", url)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    first, second = server.body_requests("/Big.gguf")
    assert (second.range_start, second.sent) == (kept, len(data) - kept)
    blob, = (localrun_home / "models" / "blobs").iterdir()
    assert blob.read_bytes() == data


def test_two_cli_pulls_at_once_download_once(server, tiny):
    url = server.add("/t.gguf", tiny.read_bytes())
    server.fault("/t.gguf", slow=1.0)
    procs = [localrun("pull", url) for _ in range(2)]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert len(server.body_requests("/t.gguf")) == 1
    assert all(out.startswith("pulled t:latest") for out, _ in results)


def test_shell_completion_offers_catalogue_and_local_names(tiny, localrun_home):
    script = shutil.which("localrun")  # completion is keyed to the console script's name
    if script is None:
        pytest.skip("the localrun console script is not installed")
    assert localrun("pull", str(tiny), "-q").wait(60) == 0

    def complete(*words: str) -> list[str]:
        env = {**os.environ, "_LOCALRUN_COMPLETE": "complete_bash", "COMP_WORDS": " ".join(["localrun", *words]),
               "COMP_CWORD": str(len(words))}
        done = subprocess.run([script], env=env,
                              capture_output=True, text=True, timeout=60)
        return done.stdout.split()

    assert "qwen2.5:0.5b" in complete("pull", "qwen2.5:0") and "smollm2" in complete("pull", "smol")
    assert complete("show", "ti") == ["tiny:latest"] and complete("rm", "x") == []


def test_rm_of_one_name_keeps_the_runner_another_name_uses(daemon):
    """cp gives the loaded model a second name; removing that name through the daemon must not unload it."""
    import httpx

    env = daemon.env()
    assert run_cli("cp", "smollm2", "alias-of-smollm2", env=env).returncode == 0
    body = {"model": "smollm2", "prompt": "", "keep_alive": -1}
    httpx.post(f"{daemon.url}/api/generate", json=body, timeout=120).raise_for_status()  # loaded
    removed = run_cli("rm", "alias-of-smollm2", env=env)
    assert (removed.returncode, removed.stdout) == (0, "deleted alias-of-smollm2\n")
    assert [m["name"] for m in httpx.get(f"{daemon.url}/api/ps").json()["models"]] == ["smollm2:135m"]
    assert run_cli("show", "smollm2", env=env).returncode == 0  # and its file is still there


def test_a_linked_model_answers_through_run(daemon, smollm2_path):
    env = daemon.env()
    linked = run_cli("pull", "--link", str(smollm2_path), env=env)
    assert linked.returncode == 0, linked.stderr
    name = linked.stdout.split("pulled ", 1)[1].split(" ", 1)[0]
    try:
        for ref in (name, name.removesuffix(":latest")):
            done = run_cli("run", ref, "Hi", "--max-tokens", "3", env=env, timeout=240)
            assert done.returncode == 0 and done.stdout.strip(), done.stderr
    finally:
        run_cli("rm", name, env=env)
