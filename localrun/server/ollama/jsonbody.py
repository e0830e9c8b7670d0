"""Read every Ollama request body as JSON, whatever its Content-Type.

Ollama decodes bodies as JSON without looking at the header, and its documented examples use
`curl URL -d '{...}'`, which labels the body application/x-www-form-urlencoded. FastAPI would
parse such a body as a form and answer 400; this route class relabels it first.
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.routing import APIRoute

JSON = b"application/json"


class JSONBodyRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            if request.headers.get("content-type", "").split(";")[0].strip().encode() != JSON:
                headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
                request = Request({**request.scope, "headers": [*headers, (b"content-type", JSON)]}, request.receive)
            return await handler(request)

        return route
