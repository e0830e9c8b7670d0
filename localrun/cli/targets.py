"""Whose models a command works with: this home's store, or the store of the server `--host` names.

This home's store holds the models when the target is a loopback address where nothing listens (the
CLI starts its own daemon there), where this home's daemon listens (its pid file is here), or where a
program that is not localrun listens and no `--host` named it (the command then says the port is
taken). Any other server keeps models of its own: a pull is asked of it over `/api/pull`, as Ollama's
CLI does, `list`, `show`, `rm` and `cp` read and change its store over `/api/tags`, `/api/show`,
`/api/delete` and `/api/copy` (whether `--host` or LOCALRUN_HOST names it), and a server that does not
speak the Ollama API (vLLM, llama-server) is used as it is for generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from localrun.client import Address, Client, PullStatus


@dataclass(frozen=True, slots=True)
class Target:
    address: Address
    local: bool  # this home's store holds the models
    up: bool  # a server answers at the address (for a local target: this home's daemon)
    taken: bool = False  # a local target's port is held by a program that is not a localrun daemon


def resolve(host: Optional[str]) -> Target:
    """The target of `--host` (or LOCALRUN_HOST when None) and whose store it uses."""
    from localrun.cli.daemon import State, probe, read_pid
    from localrun.cli.daemon_commands import target

    address = target(host)
    if not address.is_loopback:
        return Target(address, local=False, up=True)
    state = probe(address)
    if read_pid(address.port) is not None or state is State.DOWN:
        return Target(address, local=True, up=state is State.UP)
    if state is State.FOREIGN and host is None:
        return Target(address, local=True, up=False, taken=True)
    return Target(address, local=False, up=True)


def pull_on_server(client: Client, model: str, progress: Callable[[PullStatus], None]) -> None:
    """Ask the server to pull `model` into its store, reporting its streamed progress."""
    for status in client.pull(model):
        progress(status)


def ensure_served(client: Client, model: str, progress: Callable[[PullStatus], None]) -> None:
    """Have the server pull `model` when it does not have it (as `ollama run` does). A server without
    the Ollama API is left to answer for itself: its own error names a model it lacks."""
    from localrun.errors import AuthError, DaemonUnavailable, LocalrunError

    try:
        client.show(model)
        return
    except (AuthError, DaemonUnavailable):
        raise
    except LocalrunError:  # not there, or no /api/show at all
        pass
    try:
        client.version()
    except LocalrunError:
        return  # no Ollama API here (an OpenAI-only server)
    pull_on_server(client, model, progress)


__all__ = ["Target", "resolve", "pull_on_server", "ensure_served"]
