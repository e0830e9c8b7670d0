"""The chat page: static files shipped inside the package (static/), served at / and /ui/.

GET / answers a browser (Accept: text/html) with the page, and every other client with Ollama's
plain "is running" line that tools probe for; HEAD / stays Ollama's.

The page is one more client of the public HTTP API (/v1/models, /v1/chat/completions, /api/ps,
/api/pull): it gets no private route, so the key, Host/Origin and CORS guards treat its requests as
any other. There is no build step and nothing comes from a CDN; third-party scripts are vendored
(static/vendor/README.md names their versions and licenses).

Every answer carries a Content-Security-Policy that allows scripts, styles, images and connections
from this origin only, and no inline script or style: model output is sanitized before it is shown,
and if something slipped past the sanitizer the browser would still refuse to run it.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException

from localrun.server.ollama.routes import RUNNING
from localrun.server.security import OPEN_PREFIX as PREFIX  # the key guard lets the page's files through

STATIC = Path(__file__).parent / "static"

CSP = "; ".join([
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'",
    "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
])
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-cache"}
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}

router = APIRouter(include_in_schema=False)


def asset_path(name: str, root: Path = STATIC) -> Path:
    """The file under `root` that `name` names; a 404 for anything else (`..`, absolute paths, folders)."""
    base = root.resolve()
    path = (base / name).resolve()
    if not path.is_relative_to(base) or not path.is_file():
        raise HTTPException(404, f"no such file: {PREFIX}{name}")
    return path


def _file(path: Path) -> FileResponse:
    return FileResponse(path, media_type=MEDIA_TYPES.get(path.suffix, "text/plain; charset=utf-8"), headers=HEADERS)


@router.get("/")
async def index(request: Request) -> Response:
    if "text/html" not in request.headers.get("accept", ""):
        return PlainTextResponse(RUNNING)
    return _file(STATIC / "index.html")


@router.get(PREFIX + "{name:path}")
async def asset(name: str) -> FileResponse:
    return _file(asset_path(name))


__all__ = ["CSP", "PREFIX", "STATIC", "asset_path", "router"]
