"""The web dashboard's files on the HTTP listeners: `/` and `/dashboard/...`.

Theory of operation
-------------------
The dashboard is a page and a script (package `telemq.dashboard`) that read the admin API
(admin_api.py) with the credentials the person logs in with, and MQTT over WebSockets for
its topic viewer. So the files themselves hold no data and need no authentication: the page
must load before anyone has logged in. They are served as they are, with no build step;
the browser libraries (Chart.js, MQTT.js) come from the `node_modules` that `npm ci`
installed beside them (scripts/bootstrap.sh), under `/dashboard/vendor/`: a 404 naming the
missing file when it has not been run, and the page says so instead of drawing charts.

`/` is also a WebSocket path by default (MQTT clients that connect to `ws://host:port/`):
web.py hands a plain GET of `/` to `index` and an upgrade to MQTT.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from ...dashboard import ASSETS, OWN_FILES, VENDOR
from ..edges.http_errors import json_error

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# The page can only run what it ships and the vendor files (no inline scripts, no other
# origins); MQTT over WebSockets goes back to the same host.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self' ws: wss:; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


class Dashboard:
    """The dashboard's routes (installed by web.py). `/` is routed here unless the listener
    already routes it (a WebSocket path, whose handler calls `index` for a plain GET)."""

    open_paths: tuple[str, ...] = ("/", "/dashboard/*")

    def __init__(self, assets: Path = ASSETS) -> None:
        self._assets = assets

    def install(self, app: web.Application) -> None:
        if not any(resource.canonical == "/" for resource in app.router.resources()):
            app.router.add_get("/", self.index)
        app.router.add_get("/dashboard/", self.index)
        app.router.add_get("/dashboard/vendor/{name}", self._vendor)
        app.router.add_get("/dashboard/{name}", self._own)

    async def index(self, request: web.Request) -> web.StreamResponse:
        return self._file(self._assets / "index.html")

    async def _own(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in OWN_FILES:
            return json_error(404, f"the dashboard has no file {name!r}")
        return self._file(self._assets / name)

    async def _vendor(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        installed = VENDOR.get(name)
        if installed is None:
            return json_error(404, f"the dashboard uses no library file {name!r}")
        path = self._assets / "node_modules" / installed
        if not path.is_file():
            return json_error(
                404,
                f"{installed} is not installed: run `npm ci` in the dashboard's directory "
                "(scripts/bootstrap.sh does)",
            )
        return self._file(path)

    def _file(self, path: Path) -> web.StreamResponse:
        if not path.is_file():
            return json_error(404, f"the dashboard's {path.name} is missing from this install")
        headers = dict(SECURITY_HEADERS)
        headers["Content-Type"] = CONTENT_TYPES.get(path.suffix, "application/octet-stream")
        return web.FileResponse(path, headers=headers)
