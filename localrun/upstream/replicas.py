"""Which replica gets a request, decided from plain data: least busy, prefix affinity, circuit breakers.

A replica is one URL of one backend. Its circuit opens when a request or a health check fails: it is
skipped until `open_until`, a wait that doubles with each failure in a row (1 s, 2 s, ... at most
`MAX_COOLDOWN_S`), and then it is tried again (half open): the next success closes it. When every
replica's circuit is open the request is refused at once instead of waiting on dead hosts.

Least busy is the fewest requests in flight from this daemon; a tie goes to the replica used longest
ago, so a quiet daemon still spreads its requests. A conversation (its first message up to the first
user turn) remembers the replica that answered it: it goes there again while that replica is within
`AFFINITY_SLACK` requests of the least busy, so the upstream's prefix cache keeps serving it.
"""

from __future__ import annotations

import collections
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from localrun.upstream.backends import Backend

MAX_COOLDOWN_S = 30.0
AFFINITY_SLACK = 2
AFFINITY_ENTRIES = 4096


@dataclass(slots=True, eq=False)
class Replica:
    backend: Backend
    url: str
    in_flight: int = 0
    failures: int = 0  # in a row
    open_until: float = 0.0  # monotonic time; skipped until then
    last_error: str = ""
    last_used: float = 0.0
    models: tuple[str, ...] = ()  # from its /v1/models, refreshed by each health check

    def available(self, now: float) -> bool:
        return self.open_until <= now

    @property
    def full(self) -> bool:
        return bool(self.backend.max_concurrent) and self.in_flight >= self.backend.max_concurrent

    def failed(self, now: float, reason: str) -> None:
        self.failures += 1
        self.last_error = reason
        self.open_until = now + min(MAX_COOLDOWN_S, 2.0 ** (self.failures - 1))

    def succeeded(self) -> None:
        self.failures, self.open_until, self.last_error = 0, 0.0, ""

    @property
    def state(self) -> str:
        return "up" if not self.failures else "down"


class NoReplica(Exception):
    """None can take the request: `busy` when every one that is up is full, else every one is down."""

    def __init__(self, busy: bool) -> None:
        self.busy = busy


def choose(replicas: list[Replica], now: float, tried: set[int], preferred: Replica | None = None) -> Replica:
    """The replica for the next attempt of a request (`tried`: ids of those that already failed it)."""
    up = [r for r in replicas if id(r) not in tried and r.available(now)]
    free = [r for r in up if not r.full]
    if not free:
        raise NoReplica(busy=bool(up))
    least = min(free, key=lambda r: (r.in_flight, r.last_used))
    if preferred is not None and preferred in free and preferred.in_flight <= least.in_flight + AFFINITY_SLACK:
        return preferred
    return least


def conversation_key(model: str, messages: list[dict[str, Any]] | None, prompt: str | None) -> str:
    """What identifies a conversation across its turns: the model and everything up to the first user
    message (a completion: the prompt's first 256 characters)."""
    head: Any = prompt[:256] if messages is None else []
    for message in messages or []:
        head.append(message)
        if message.get("role") == "user":
            break
    return hashlib.sha256(json.dumps([model, head], sort_keys=True, default=str).encode()).hexdigest()


@dataclass(slots=True)
class Affinity:
    """Conversation key -> the replica that answered it last; the oldest entries are forgotten."""

    entries: collections.OrderedDict[str, Replica] = field(default_factory=collections.OrderedDict)

    def get(self, key: str) -> Replica | None:
        return self.entries.get(key)

    def remember(self, key: str, replica: Replica) -> None:
        self.entries[key] = replica
        self.entries.move_to_end(key)
        while len(self.entries) > AFFINITY_ENTRIES:
            self.entries.popitem(last=False)


__all__ = ["Affinity", "NoReplica", "Replica", "choose", "conversation_key"]
