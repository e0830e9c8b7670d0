"""Exiting without the last collections (localrun/quick_exit.py) keeps what a process printed, logged and closed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import atexit, logging, sys
    from localrun.quick_exit import skip_exit_collection

    skip_exit_collection()
    log_path, file_path, atexit_path = sys.argv[1:]
    logging.basicConfig(filename=log_path, level=logging.INFO)
    logging.getLogger("x").info("logged")
    with open(file_path, "w") as closed:
        closed.write("written")
    atexit.register(lambda: open(atexit_path, "w").write("ran"))
    print("printed", end="")
""")


def test_output_logs_closed_files_and_atexit_handlers_are_complete_after_a_quick_exit(tmp_path):
    paths = [tmp_path / name for name in ("log", "file", "atexit")]
    done = subprocess.run([sys.executable, "-c", SCRIPT, *map(str, paths)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "printed", "")
    assert "logged" in paths[0].read_text()
    assert paths[1].read_text() == "written"
    assert paths[2].read_text() == "ran"


def test_the_cli_and_the_runner_exit_that_way():
    """Both entry points install it: `python -m localrun` and `python -m localrun.runner` (each a
    process of its own, so registering at import would not do)."""
    probe = ("import atexit, gc, runpy, sys; calls = []; atexit.register = lambda f, *a: calls.append(f); "
             "sys.argv = [sys.argv[1], '--version' if sys.argv[1] == 'localrun' else '--help']\n"
             "try: runpy.run_module(sys.argv[0], run_name='__main__')\n"
             "except SystemExit: pass\n"
             "print(gc.freeze in calls)")
    for module in ("localrun", "localrun.runner"):
        done = subprocess.run([sys.executable, "-c", probe, module], capture_output=True, text=True, timeout=60)
        assert done.stdout.strip().splitlines()[-1] == "True", (module, done.stdout, done.stderr)
