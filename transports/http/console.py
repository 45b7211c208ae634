"""The web console's files (``transports/http/static/``) at ``/``.

``/`` is ``index.html``; other files are served by name at ``/<name>`` (what the page links
relatively, e.g. ``app.js``) and at ``/static/<path>``. These routes are public: the files hold
no data (the page asks for the token and calls the API with it). A name that is no file is a 404
to a caller with a valid token only, a 401 to anyone else (the guard: unknown paths say
nothing). Files are looked up per request, confined to the static directory; when the console
is not installed, ``/`` says so.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from transports.http.failures import ApiError

STATIC_DIR = Path(__file__).with_name("static")
PUBLIC_ROUTES = frozenset({"console-index", "console-file", "console-static"})
HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
PLACEHOLDER = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>reel</title></head>
<body><h1>reel</h1><p>The web console is not installed in this build.
The API is at <code>/v1/</code> (see <code>/v1/openapi.json</code>).</p></body></html>
"""

routes = web.RouteTableDef()


def static_file(relative: str, root: Path = STATIC_DIR) -> Path:
    """The file ``relative`` names inside ``root``, or a 404 (hidden files and escapes too)."""
    parts = [p for p in relative.split("/") if p]
    if not parts or any(p.startswith(".") or "\\" in p or "\x00" in p for p in parts):
        raise ApiError("not_found", "no such file")
    base = root.resolve()
    try:
        path = base.joinpath(*parts).resolve()
    except (OSError, ValueError):
        raise ApiError("not_found", "no such file") from None
    if not path.is_relative_to(base) or not path.is_file():
        raise ApiError("not_found", "no such file")
    return path


@routes.get("/", name="console-index")
async def index(request: web.Request) -> web.StreamResponse:
    page = STATIC_DIR / "index.html"
    if not page.is_file():
        return web.Response(body=PLACEHOLDER, content_type="text/html", headers=HEADERS)
    return web.FileResponse(page, headers=HEADERS)


@routes.get("/static/{path:.+}", name="console-static")
async def static(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(static_file(request.match_info["path"]), headers=HEADERS)


@routes.get("/{name}", name="console-file")
async def top_level_file(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(static_file(request.match_info["name"]), headers=HEADERS)
