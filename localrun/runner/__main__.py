"""`python -m localrun.runner`: host one engine for one model file, speaking the runner protocol.

    python -m localrun.runner --model FILE --fd N --settings JSON   JSON: localrun.config.EngineSettings
    python -m localrun.runner --info        print what this llama.cpp build can do, as JSON
    python -m localrun.runner --worker HOST:PORT [--threads N]   serve ggml's RPC server (`localrun worker`)

The daemon starts one of these per loaded model (see protocol.py). A crash in here, even an abort
inside llama.cpp, ends this process only; the daemon tells the requests in flight why.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m localrun.runner", description=__doc__.splitlines()[0])
    p.add_argument("--info", action="store_true", help="print the llama.cpp build's capabilities as JSON and exit")
    p.add_argument("--model", help="GGUF file to load")
    p.add_argument("--fd", type=int, help="inherited socket file descriptor to speak the protocol on")
    p.add_argument("--settings", default="{}", help="EngineSettings as JSON (omitted fields take their defaults)")
    p.add_argument("--worker", metavar="HOST:PORT", help="lend this machine's devices to llama.cpp RPC clients")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of a worker")
    return p


def build_info() -> dict:
    """What `localrun doctor` shows about the inference build."""
    import llama_cpp

    from localrun.engine import rpc
    from localrun.engine.backend import extra_buffer_types, has_gpu, init_backend, system_info
    from localrun.engine.settings import physical_cores

    plan = init_backend()
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": system_info(),
        "cpu": plan.lines(),
        "cpu_missing": [f.name for f in plan.missing],
        "extra_buffer_types": extra_buffer_types(),
        "supports_gpu_offload": has_gpu(),
        "supports_mmap": bool(llama_cpp.llama_supports_mmap()),
        "max_devices": int(llama_cpp.llama_max_devices()),
        "cpu_count": os.cpu_count(),
        "default_threads": physical_cores(),
        "rpc": rpc.available(),
        **({} if rpc.available() else {"rpc_hint": rpc.REBUILD}),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.info:
        print(json.dumps(build_info()))
        return 0
    if args.worker:
        return _worker(args.worker, args.threads)
    if not args.model or args.fd is None:
        _parser().error("--model and --fd are required")
    # An abort inside llama.cpp (GGML_ASSERT) must end in one line on stderr, which the daemon
    # reports; ggml's gdb backtrace would bury that line under frames and take seconds.
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    from localrun.runner.protocol import Channel

    channel = Channel(socket.socket(fileno=args.fd))
    engine = _load(args, channel)
    if engine is None:
        return 1
    from localrun.runner.host import RunnerHost

    channel.send({"type": "ready", "info": engine.info})
    RunnerHost(engine, channel).run()
    engine.close()
    return 0


def _worker(endpoint: str, threads: int | None) -> int:
    """Serve until killed; Ctrl-C ends it (ggml's server runs in a thread: C code would not see it)."""
    from localrun.engine import rpc
    from localrun.errors import LocalrunError

    host, _, port = endpoint.rpartition(":")
    try:
        thread = rpc.serve_worker(host.strip("[]"), int(port), threads)
        print(f"localrun worker: lending {', '.join(rpc.device_names())} to llama.cpp RPC clients on {endpoint}",
              file=sys.stderr, flush=True)
        while thread.is_alive():
            thread.join(0.5)
    except LocalrunError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    print(f"error: the RPC server could not listen on {endpoint} (is the port taken?)", file=sys.stderr)
    return 1


def _load(args: argparse.Namespace, channel):
    from localrun.config import EngineSettings
    from localrun.engine import Engine
    from localrun.errors import LocalrunError

    try:
        return Engine(args.model, EngineSettings.from_json(args.settings))
    except LocalrunError as e:
        channel.send({"type": "fatal", "message": e.message})
    except Exception as e:  # anything llama.cpp or the file throws at load time
        channel.send({"type": "fatal", "message": f"model failed to load: {e}"})
    return None


if __name__ == "__main__":
    from localrun.quick_exit import skip_exit_collection

    skip_exit_collection()
    sys.exit(main())
