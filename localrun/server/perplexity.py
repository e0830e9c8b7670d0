"""`POST /api/perplexity` (a localrun extension): llama-perplexity's measure of a text under a model,
so a quantization can be compared with its source.

    {"model": "smollm2", "text": "...", "ctx": 512, "batch": 2048}
    -> {"perplexity": 12.3, "nll": 2.51, "tokens": 4100, "scored": 2032, "chunks": 8, "ctx": 512, "seconds": 3.1}
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from localrun.server import operations
from localrun.server.hangup import unless_hung_up
from localrun.server.jsonbody import JSONBodyRoute
from localrun.server.wire import WireModel

router = APIRouter(tags=["perplexity"], route_class=JSONBodyRoute)

MAX_TOKENS = 1 << 20
MAX_BATCH = 16384  # llama-perplexity's default is 2048; more only grows the job's own KV cache


class PerplexityRequest(WireModel):
    model: str = Field(min_length=1)
    text: str = Field(min_length=1)
    ctx: int = Field(512, ge=16, le=MAX_TOKENS, description="Tokens per chunk; the second half of each chunk is "
                                                            "scored. At most the model's context length.")
    batch: int = Field(2048, ge=1, le=MAX_BATCH, description="Tokens per llama_decode: batch // ctx chunks "
                                                             "evaluated together.")


@router.post("/api/perplexity")
async def perplexity(body: PerplexityRequest, request: Request) -> dict[str, Any]:
    """Minutes of work on a long text: a client that hangs up stops it (see server/hangup.py). Its
    context's KV cache counts against the memory budget while it runs."""
    job = operations.perplexity(request.app.state.manager, body.model, body.text, body.ctx, body.batch)
    return (await unless_hung_up(request, job)).to_dict()
