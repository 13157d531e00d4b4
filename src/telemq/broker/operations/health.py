"""`GET /health`: which role a broker plays, for load balancers (docs/ha.md).

Theory of operation
-------------------
A load balancer in front of an active broker and its standbys (`[ha]`) routes MQTT by
the answer of `/health` on each broker's `[[http]]` listener: 200 from the active broker,
503 from a standby, with the same JSON body either way (`Leadership.health`:
``{"role": "active"|"standby", "broker", "ha", "since", "takeovers", ...}``). A broker
without `[ha]` always answers 200. The path is open (no HTTP authentication): a load
balancer's check carries no credentials, and the answer tells nothing but the role.

The active broker serves it among its other routes (`HealthRoute`, installed by web.py). A
standby has no state to serve, so it runs `StandbyHttp` on the same listeners instead:
`/health`, and 503 in JSON for every other path (the journal service, the admin API,
WebSockets are the active broker's).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from ..edges.http_errors import HttpProtocol, json_error, json_errors
from ..settings.config import HttpConfig
from ..settings.tls import server_context
from .leadership import Leadership

__all__ = ["HealthRoute", "StandbyHttp"]

log = logging.getLogger("telemq.http")

_NO_ACCESS_LOG: dict[str, Any] = {"access_log": None}


def _health(leadership: Leadership) -> web.Response:
    status, body = leadership.health()
    return web.json_response(body, status=status, headers={"Cache-Control": "no-store"})


class HealthRoute:
    """`GET /health` on an active broker's HTTP listeners (installed by web.py)."""

    open_paths: tuple[str, ...] = ("/health",)

    def __init__(self, leadership: Leadership) -> None:
        self._leadership = leadership

    def install(self, app: web.Application) -> None:
        app.router.add_get("/health", self._answer)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        return _health(self._leadership)


class StandbyHttp:
    """A standby's `[[http]]` listeners: `/health`, and 503 for everything else."""

    def __init__(self, configs: list[HttpConfig], leadership: Leadership) -> None:
        self._configs = configs
        self._leadership = leadership
        self._runners: list[web.AppRunner] = []
        self._servers: list[asyncio.Server] = []
        self.ports: list[int] = []

    def application(self) -> web.Application:
        app = web.Application(middlewares=[json_errors])
        app.router.add_get("/health", self._answer)
        app.router.add_route("*", "/{tail:.*}", self._standby)
        return app

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        return _health(self._leadership)

    async def _standby(self, request: web.Request) -> web.StreamResponse:
        active = self._leadership.active
        return json_error(
            503, "this broker is a standby" + (f"; the active one is {active}" if active else "")
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for index, config in enumerate(self._configs):
            runner = web.AppRunner(self.application(), access_log=None)
            await runner.setup()
            self._runners.append(runner)
            manager = runner.server
            assert manager is not None

            def connection(manager: web.Server = manager) -> HttpProtocol:
                return HttpProtocol(manager, loop=loop, **_NO_ACCESS_LOG)

            context = server_context(config.tls_listener(), f"http[{index}]")
            server = await loop.create_server(
                connection, config.host, config.port, ssl=context, reuse_address=True
            )
            self._servers.append(server)
            sockets = list(server.sockets or ())
            self.ports.append(sockets[0].getsockname()[1] if sockets else config.port)
            log.info("standby: /health on %s:%d", config.host, self.ports[-1])

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()
