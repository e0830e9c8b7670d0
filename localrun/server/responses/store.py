"""Earlier responses, kept in memory for `previous_response_id` and GET/DELETE /v1/responses/{id}.

Bounded by count: the oldest response is forgotten first. A stored response keeps the whole
conversation that led to it (its input items after its predecessors'), as lists of references to
the same item dicts, so a chain of N turns costs N small lists, not N copies of the conversation.
Nothing is written to disk: a restarted daemon has forgotten them, as a 404 will say.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Stored:
    response: dict[str, Any]
    items: list[dict[str, Any]]  # every input item of the conversation up to this response

    @property
    def conversation(self) -> list[dict[str, Any]]:
        """What a follow-up starts from: this response's input, then its output."""
        return self.items + self.response["output"]


class ResponseStore:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._kept: OrderedDict[str, Stored] = OrderedDict()

    def put(self, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
        self._kept[response["id"]] = Stored(response, items)
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)

    def get(self, response_id: str) -> Stored | None:
        return self._kept.get(response_id)

    def delete(self, response_id: str) -> bool:
        return self._kept.pop(response_id, None) is not None

    def __len__(self) -> int:
        return len(self._kept)
