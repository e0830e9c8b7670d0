"""Every route reads its body as JSON, whatever the Content-Type, and reuses the body's one parse.

Ollama and llama-server decode bodies as JSON without looking at the header, and the documented
examples (Ollama's, and this README's) use `curl URL -d '{...}'`, which labels the body
application/x-www-form-urlencoded: FastAPI would parse that as a form and answer 400, so this route
class relabels it first. And BodyLimits (body.py) has already parsed the body, off the event loop
when it is large: the route takes that value instead of parsing the bytes a second time.
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.routing import APIRoute

from localrun.server.body import PARSED

JSON = b"application/json"


class JSONBodyRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            if request.headers.get("content-type", "").split(";")[0].strip().encode() != JSON:
                headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
                request = Request({**request.scope, "headers": [*headers, (b"content-type", JSON)]}, request.receive)
            if PARSED in request.scope:
                request._json = request.scope[PARSED]  # Starlette's own cache of request.json()
            return await handler(request)

        return route


__all__ = ["JSONBodyRoute"]
