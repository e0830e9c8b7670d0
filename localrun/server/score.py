"""`POST /v1/score` (a localrun extension): exact log-probabilities of candidate answers.

    {"model": "smollm2", "prompt": "The capital of France is", "options": [" Paris", " Lyon"]}
    {"model": "smollm2", "messages": [...], "options": ["yes", "no"], "normalize": "mean"}
    -> {"object": "score", "model", "choices": [{"index", "option", "logprob", "tokens", "score", "prob"}],
        "usage": {"prompt_tokens", "cached_tokens", "option_tokens"}, "timings": {"score_ms"}}

`logprob` is the sum of the option tokens' log-probabilities under the full-vocabulary distribution
(no temperature, no top-k). `score` is `logprob`, or its mean per token with `"normalize": "mean"`;
`prob` is the softmax of the options' scores. A `prompt` is used as written; `messages` are rendered
with the chat template and its generation prompt.

The boundary rule: an option is tokenized on its own (no BOS, special tokens as text) and its tokens
follow the prompt's. Text is never re-tokenized across the boundary, so " Paris" (with its space)
and "Paris" are different options; write options as they would continue the prompt.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import Field, model_validator

from localrun.api_types import ScoredOption, ScoreResponse
from localrun.errors import InvalidRequest
from localrun.server import operations
from localrun.server.jsonbody import JSONBodyRoute
from localrun.server.messages import normalize_messages
from localrun.server.wire import WireModel

router = APIRouter(tags=["score"], route_class=JSONBodyRoute)

MAX_OPTIONS = 256


class ScoreRequest(WireModel):
    model: str = Field(min_length=1)
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    options: list[str] = Field(min_length=1, max_length=MAX_OPTIONS)
    normalize: Literal["sum", "mean"] = "sum"

    @model_validator(mode="after")
    def _one_prompt(self) -> ScoreRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send either prompt or messages")
        return self


@router.post("/v1/score")
async def score(body: ScoreRequest, request: Request) -> dict[str, Any]:
    _check_options(body.options)
    messages = normalize_messages(body.messages) if body.messages is not None else None
    answer = await operations.score(request.app.state.manager, body.model, body.options, body.prompt, messages)
    scores = [lp / n if body.normalize == "mean" else lp for lp, n in zip(answer.logprobs, answer.tokens)]
    choices = [ScoredOption(i, option, lp, n, s, p) for i, (option, lp, n, s, p) in
               enumerate(zip(body.options, answer.logprobs, answer.tokens, scores, softmax(scores)))]
    return ScoreResponse(body.model, choices, answer.prompt_tokens, answer.cached_tokens, sum(answer.tokens),
                         answer.ms).to_dict()


def _check_options(options: list[str]) -> None:
    if any(not option for option in options):
        raise InvalidRequest("options: an option must not be empty")
    if len(set(options)) != len(options):
        raise InvalidRequest("options: each option must be different")


def softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]
