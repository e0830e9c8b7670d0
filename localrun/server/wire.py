"""The base of every request body model, for all dialects.

Unknown fields are accepted and ignored: real clients send extras. Known fields are strict, as the
official APIs are: `"max_tokens": "99999999999"`, `"stream": "yes"` and `"n": true` are 400s, not
coerced (a string slipped past the LOCALRUN_MAX_TOKENS limit, which checks numbers), and NaN or
infinity (`1e400` is valid JSON) is refused wherever a number is expected.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class WireModel(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


# localrun's extension on every dialect that has no budget of its own (Anthropic's thinking has one)
ReasoningBudget = Annotated[int | None,
                            Field(ge=0, lt=2**31, description="localrun: most thinking tokens, then the answer")]

__all__ = ["ReasoningBudget", "WireModel"]
