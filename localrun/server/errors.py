"""Errors in each dialect's own shape, chosen by the request (`dialect`):

    /v1/messages...  Anthropic  {"type": "error", "error": {"type", "message"}}; also /v1/models...
                                when the request carries `anthropic-version` (the anthropic SDKs do)
    /v1/...          OpenAI     {"error": {"message", "type", "param", "code"}}: `param` names the field
                                at fault when it is known, `code` is a string or null, as OpenAI sends
    anything else    Ollama     {"error": "message"}
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import Scope

from localrun.errors import InvalidRequest, LocalrunError, ModelNotFound, Overloaded

log = logging.getLogger("localrun.server")

_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 404: "not_found_error", 413: "invalid_request_error", 429: "rate_limit_error", 503: "server_error"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def dialect(scope: Scope) -> str:
    """"anthropic", "openai" or "ollama": whose API an HTTP request's path (and, on the one path two
    dialects share, its headers) belongs to."""
    path = scope.get("path", "")
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1/models") and any(name == b"anthropic-version" for name, _ in scope.get("headers", ())):
        return "anthropic"
    return "openai" if path.startswith("/v1/") else "ollama"


def error_body(kind: str, status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """The error in dialect `kind`'s shape (see `dialect`)."""
    if kind == "anthropic":
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    if kind == "openai":
        return {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "server_error"), "param": param,
                          "code": code or _OPENAI_CODES.get(status)}}
    return {"error": message}


_OPENAI_CODES = {401: "invalid_api_key", 413: "request_too_large", 429: "rate_limit_exceeded"}


def error_response(kind: str, status: int, message: str, headers: dict[str, str] | None = None,
                   param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(kind, status, message, param, code), status_code=status, headers=headers)


def localrun_error_response(kind: str, error: LocalrunError) -> JSONResponse:
    headers = {"Retry-After": str(error.retry_after)} if isinstance(error, Overloaded) else None
    param = error.param if isinstance(error, InvalidRequest) else None
    code = "model_not_found" if isinstance(error, ModelNotFound) else None
    return error_response(kind, error.status, error.message, headers, param, code)


def field_path(path: tuple[Any, ...]) -> str:
    """("messages", 1, "role") -> "messages[1].role", as errors name a request's fields."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _field(loc: tuple[Any, ...]) -> str:
    """A pydantic error location (it starts with "body") as a field path."""
    return field_path(loc[1:] if loc[:1] == ("body",) else loc)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = _field(tuple(err.get("loc", ())))
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
    return "invalid request: " + "; ".join(parts)


def install(app: FastAPI) -> None:
    """Register handlers so that every failure, expected or not, answers in the caller's dialect."""

    @app.exception_handler(LocalrunError)
    async def _localrun(request: Request, exc: LocalrunError) -> JSONResponse:
        return localrun_error_response(dialect(request.scope), exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        param = _field(tuple(errors[0].get("loc", ()))) or None if errors else None
        return error_response(dialect(request.scope), 400, _validation_message(exc), param=param)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        return error_response(dialect(request.scope), exc.status_code, str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return error_response(dialect(request.scope), 500, f"internal error ({type(exc).__name__}); the server log "
                              "has the details")
