"""Anthropic routes: thin handlers over translate.py, stream.py and the one generation path.

`?beta=true` (Claude Code) and the x-api-key / anthropic-version / anthropic-beta headers are
accepted as they come; errors take Anthropic's envelope from server/errors.py by path.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from localrun.errors import LocalrunError
from localrun.server import generation, operations
from localrun.server.anthropic import translate as t
from localrun.server.anthropic.protocol import CountTokensRequest, MessagesRequest
from localrun.server.anthropic.stream import message_events
from localrun.server.errors import error_body
from localrun.server.hangup import unless_hung_up
from localrun.server.jsonbody import JSONBodyRoute
from localrun.server.streaming import event_stream, sse
from localrun.server.validate import check_tools

router = APIRouter(tags=["anthropic"], route_class=JSONBodyRoute)


def _stream_error(e: LocalrunError) -> str:
    return sse(error_body("/v1/messages", e.status, e.message), event="error")


@router.post("/v1/messages")
async def messages(body: MessagesRequest, request: Request) -> Any:
    native = t.generate_request(body)
    manager = request.app.state.manager
    if body.stream:
        gen = await generation.start(manager, native)
        return event_stream(message_events(gen, body.model), _stream_error)
    result = await unless_hung_up(request, generation.collect(manager, native))
    return t.message(result.choices[0], body.model)


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, int]:
    """The real count: the conversation, with the model's Modelfile prompt, through its chat template and tokenizer."""
    tools = t.tools(body.tools)
    check_tools(tools)
    count = await operations.count_tokens(request.app.state.manager, body.model, t.conversation(body), tools,
                                          t.tool_choice(body.tool_choice))
    return {"input_tokens": count}
