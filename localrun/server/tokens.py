"""Tokenizer routes (a localrun extension, shaped like llama-server's /tokenize and /detokenize,
with a `model` field since the daemon serves several)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import Field

from localrun.server import operations
from localrun.server.jsonbody import JSONBodyRoute
from localrun.server.wire import WireModel

router = APIRouter(tags=["tokens"], route_class=JSONBodyRoute)


class TokenizeRequest(WireModel):
    model: str = Field(min_length=1)
    text: str
    add_special: bool = False


class DetokenizeRequest(WireModel):
    model: str = Field(min_length=1)
    tokens: list[int]


@router.post("/api/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, list[int]]:
    answer = await operations.tokenize(request.app.state.manager, body.model, body.text, body.add_special)
    return {"tokens": answer.tokens}


@router.post("/api/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, str]:
    answer = await operations.detokenize(request.app.state.manager, body.model, body.tokens)
    return {"text": answer.text}
