"""The base of every request body model, for all dialects.

Unknown fields are accepted and ignored: real clients send extras. Known fields are strict, as the
official APIs are: `"max_tokens": "99999999999"`, `"stream": "yes"` and `"n": true` are 400s, not
coerced (a string slipped past the LOCALRUN_MAX_TOKENS limit, which checks numbers), and NaN or
infinity (`1e400` is valid JSON) is refused wherever a number is expected.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


__all__ = ["WireModel"]
