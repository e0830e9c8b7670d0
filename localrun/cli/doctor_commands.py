"""`localrun doctor`: what this install can do and where things are.

The llama.cpp facts come from `python -m localrun.runner --info` in a subprocess: the CLI never
imports the engine, and a broken llama.cpp build shows up as a line here instead of a crash.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from localrun.cli.app import app


def build_info(timeout: float = 60.0) -> dict[str, Any]:
    """The runner's build report, or {"error": ...} saying why there is none."""
    try:
        done = subprocess.run([sys.executable, "-m", "localrun.runner", "--info"], capture_output=True,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"could not run the runner: {e}"}
    lines = [line for line in done.stdout.splitlines() if line.strip().startswith("{")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"error": last}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": "the runner printed something that is not JSON"}


def paths_report() -> dict[str, str]:
    from localrun import paths

    return {"data": str(paths.data_dir()), "models": str(paths.models_dir()), "config": str(paths.config_dir()),
            "logs": str(paths.log_dir()), "runtime": str(paths.runtime_dir())}


def disk_free(path: Path) -> int:
    """Free bytes on the file system that holds `path` (or its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def daemon_report(host: Optional[str]) -> dict[str, Any]:
    from localrun.cli import daemon
    from localrun.cli.daemon_commands import target

    address = target(host)
    state = daemon.probe(address)
    return {"address": address.base_url, "state": state.value, "pid": daemon.read_pid(address.port),
            "log": str(daemon.log_file(address.port))}


def report(host: Optional[str]) -> dict[str, Any]:
    from localrun import __version__, paths

    return {"localrun": __version__, "python": sys.version.split()[0], "llama_cpp": build_info(),
            "safe_mode": safe_mode_report(),
            "paths": paths_report(), "disk_free_bytes": disk_free(paths.models_dir()),
            "daemon": daemon_report(host), "backends": backends_report()}


def backends_report() -> list[dict[str, Any]]:
    """Each backend of backends.toml with what its replicas answer now (a bad file: one entry saying so)."""
    from localrun.errors import LocalrunError
    from localrun.upstream import backends

    try:
        declared = backends.load().backends.values()
    except LocalrunError as e:
        return [{"name": "backends.toml", "error": e.message}]
    return [{**b.summary(), "replicas": b.check()} for b in declared]


_SHOWN = ("system_info", "supports_gpu_offload", "devices", "default_threads", "cpu", "cpu_missing",
          "extra_buffer_types", "rpc", "rpc_hint")


def safe_mode_report() -> str:
    """Why this build needs safe mode on this CPU, as remembered by the daemon; "" when it does not."""
    from localrun.safe_mode import SafeModeMemory

    return SafeModeMemory().reason or ""


def render(data: dict[str, Any]) -> str:
    from localrun.cli.format import human_size

    build = data["llama_cpp"]
    lines = [f"localrun {data['localrun']} (Python {data['python']})", "", "llama.cpp build"]
    if "error" in build:
        lines.append(f"  unavailable: {build['error']}")
    else:
        devices = build.get("devices") or []
        lines += [f"  GPU offload      {'yes' if build.get('supports_gpu_offload') else 'no (CPU build)'}",
                  f"  devices          {', '.join(map(str, devices)) if devices else 'none'}",
                  f"  default threads  {build.get('default_threads', '?')}",
                  f"  system info      {build.get('system_info', '')}",
                  f"  weight buffers   {', '.join(build.get('extra_buffer_types') or []) or 'plain CPU only'}",
                  f"  RPC backend      {'yes (localrun worker, serve --rpc)' if build.get('rpc') else 'no: ' + str(build.get('rpc_hint'))}"]
        lines += [f"  {k:<16} {v}" for k, v in build.items() if k not in _SHOWN]
        lines += ["", "CPU features"] + [f"  {line}" for line in build.get("cpu", [])]
        if data.get("safe_mode"):
            lines.append(f"  safe mode        remembered for this build on this CPU ({data['safe_mode']})")
    lines += ["", "paths"] + [f"  {k:<16} {v}" for k, v in data["paths"].items()]
    lines += [f"  {'disk free':<16} {human_size(data['disk_free_bytes'])}", "", "daemon"]
    d = data["daemon"]
    state = {"up": f"running (pid {d['pid'] or 'unknown'})", "down": "not running",
             "foreign": "port taken by another program"}[d["state"]]
    lines += [f"  {'address':<16} {d['address']}", f"  {'state':<16} {state}", f"  {'log':<16} {d['log']}"]
    return "\n".join(lines + _render_backends(data.get("backends") or []))


def _render_backends(backends: list[dict[str, Any]]) -> list[str]:
    lines = ["", "backends (backends.toml)"] + ([] if backends else ["  none"])
    for b in backends:
        if "error" in b:
            lines.append(f"  {b['name']:<16} error: {b['error']}")
            continue
        if b["api_key_env"]:
            lines.append(f"  {b['name']:<16} key ${b['api_key_env']} {'set' if b['api_key_set'] else 'NOT SET'}")
        for r in b["replicas"]:
            state = f"ok, {len(r['models'])} models" if r["ok"] else f"unreachable: {r['error']}"
            lines.append(f"  {b['name']:<16} {r['url']}  {state}")
    return lines


@app.command()
def doctor(
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    host: Optional[str] = typer.Option(None, "--host", help="Daemon address; default LOCALRUN_HOST."),
) -> None:
    """Show the llama.cpp build (CPU features, GPU offload), threads, paths, disk space and daemon status."""
    data = report(host)
    print(json.dumps(data, indent=2) if json_out else render(data))
