"""The broker's HTTP surface assembled: what its `[[http]]` listeners serve.

Theory of operation
-------------------
`http.HttpServer` owns the listeners, authentication and the journal service; MQTT over
WebSockets (websockets.py) and the routes here plug into it through its seams (the
`websocket` handler and `HttpRoutes`). This module is the only one that knows all of them and
the broker they read: `/metrics` (metrics.py), the admin API (admin_api.py), `/health`
(health.py) and the dashboard (dashboard.py), which shares `/` with MQTT over WebSockets:
an upgrade is an MQTT client, a plain GET a person. The broker imports it only when
`[[http]]` is configured, so a broker without HTTP never loads aiohttp or prometheus_client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from ..store import JournalReaders
from .core.session import Client, as_protocol
from .edges.http import Handler, HttpAuth, HttpServer
from .edges.websockets import mqtt_over_websocket
from .operations.admin_api import AdminApi
from .operations.dashboard import Dashboard
from .operations.health import HealthRoute
from .operations.metrics import MetricsRoute
from .security.acl import Action

if TYPE_CHECKING:
    from .core.session import ClientHub
    from .operations.view import BrokerView, Operations
    from .security.hooks import Hooks
    from .settings.config import HttpConfig

SYS_TOPICS = "$SYS/#"


def http_server(
    view: BrokerView, operations: Operations, hub: ClientHub, hooks: Hooks
) -> HttpServer:
    """The `[[http]]` listeners of a broker, not started yet: its reports read `view`, an
    administrator's changes go through `operations`, its WebSocket clients join `hub`, and
    `hooks` authenticate and authorize the HTTP users."""
    config = view.rooms.config
    auth = HttpAuth(
        lambda user, password: hooks.authenticate("", user, password),
        lambda user, topic: hooks.may(Action.JOURNAL, topic, user, ""),
        hooks.is_admin,
        hooks.authenticate_off_loop,
    )

    def may_watch(user: str) -> bool:
        """The metrics are the `$SYS` values: for whoever may subscribe to them."""
        return (bool(user) and hooks.is_admin(user)) or hooks.may(
            Action.SUBSCRIBE, SYS_TOPICS, user, ""
        )

    location = config.store.journal_location()
    journal = JournalReaders(location) if location is not None else None  # the server's
    dashboard = Dashboard()
    metrics = MetricsRoute(view, may_watch)
    admin = AdminApi(view, operations, hooks.is_admin, journal)

    def websocket(http: HttpConfig) -> Handler:
        mqtt = mqtt_over_websocket(
            lambda listener: as_protocol(Client(hub, listener)),
            http.tls_listener(),
            config.limits.max_packet_size,
        )

        async def mqtt_or_page(request: web.Request) -> web.StreamResponse:
            """`/` is both: an upgrade is an MQTT client, a plain GET a person."""
            if request.path == "/" and request.headers.get("Upgrade", "").lower() != "websocket":
                return await dashboard.index(request)
            return await mqtt(request)

        return mqtt_or_page

    return HttpServer(
        config.http,
        auth,
        view.store,
        view.executor,
        journal,
        websocket,
        routes=[metrics, admin, HealthRoute(view.leadership), dashboard],
    )
