"""The admin REST API, `/api/v1` on the HTTP listeners (docs/operations.md, "Admin API").

Theory of operation
-------------------
For the broker's administrators (users marked `admin = true`, or a hook's `is_admin`) and
nobody else: HTTP authentication (http.py) has found the user; each handler here refuses
anyone else with 403 before reading anything. The API reads the rooms' state on the event
loop, where it is changed, so a listing is a consistent snapshot; it changes state only
through the broker's own operations (a client's `close`, `delete_retained`, `publish`), the
ones MQTT and the MQ commands use, so it adds no second owner to any piece of state. Every
change is logged with the administrator's name (logger `telemq.admin`).

The JSON shapes are in `admin_views.py`; the contract, for people and code generators, is
`openapi.json` beside this file, served at `/api/v1/openapi.json` without authentication
(it holds no data). Errors are ``{"error": "..."}`` with 400, 401, 403, 404 or 503 from
here, and 405, 413 or 500 from the listener's `json_errors` (http.py).

Lists take `limit` (default 100, at most 1000) and `offset`, and say their `total`, so a
page of a broker with a million sessions costs a page, plus the walk that filters them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from ...protocol import ReasonCode
from ...protocol.topics import topic_filter_error
from ...store import JournalReaders, StoreError
from ..edges.http import USER, Handler, offset_json, read_journal
from ..edges.http_errors import json_error
from .admin_views import client_json, retained_json, session_json, subscription_json
from .view import FIGURES, BrokerView, Operations

_API_FIGURES = tuple(figure for figure in FIGURES if figure.api)

if TYPE_CHECKING:
    from ..core.session import Client

log = logging.getLogger("telemq.admin")

PREFIX = "/api/v1"
OPENAPI = Path(__file__).resolve().parent / "openapi.json"
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
T = TypeVar("T")
AdminHandler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]  # request, admin


class AdminApi:
    """The `/api/v1` routes of one broker (installed by web.py)."""

    open_paths: tuple[str, ...] = (PREFIX + "/openapi.json",)

    def __init__(
        self,
        view: BrokerView,
        operations: Operations,
        is_admin: Callable[[str], bool],
        journal: JournalReaders | None = None,
    ) -> None:
        self._view = view  # what the listings read
        self._operations = operations  # what a change goes through
        self._is_admin = is_admin
        self._journal_readers = journal  # the HTTP server's (None: the memory store)

    def install(self, app: web.Application) -> None:
        routes = [
            ("GET", "/overview", self._overview),
            ("GET", "/clients", self._clients),
            ("GET", "/clients/{client_id}", self._client),
            ("DELETE", "/clients/{client_id}", self._disconnect),
            ("GET", "/sessions", self._sessions),
            ("GET", "/subscriptions", self._subscriptions),
            ("GET", "/retained", self._retained_list),
            ("GET", "/retained/{topic:.+}", self._retained_one),
            ("DELETE", "/retained/{topic:.+}", self._retained_delete),
            ("POST", "/publish", self._publish),
            ("GET", "/journal", self._journal),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, PREFIX + path, self._admin_only(handler))
        app.router.add_get(PREFIX + "/openapi.json", self._openapi)

    def _admin_only(self, handler: AdminHandler) -> Handler:
        """`handler`, for administrators only; it gets the administrator's name."""

        async def checked(request: web.Request) -> web.StreamResponse:
            user: str = request[USER]
            if not user or not self._is_admin(user):
                who = repr(user) if user else "the anonymous user"
                return json_error(403, f"the admin API is for administrators, not {who}")
            return await handler(request, user)

        return checked

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(OPENAPI, headers={"Content-Type": "application/json"})

    # -- overview, clients, sessions ---------------------------------------------------

    async def _overview(self, request: web.Request, admin: str) -> web.StreamResponse:
        overview = self._view.overview()
        leadership = self._view.leadership
        body: dict[str, Any] = {
            "version": overview.version,
            "role": overview.role,
            "broker": leadership.broker,
            "ha": leadership.enabled,
            "member": leadership.member,
            "role_since": round(leadership.since, 3),
        }
        for figure in _API_FIGURES:
            body[figure.key] = int(overview.values[figure.key])
        body["uptime_seconds"] = round(overview.values["uptime_seconds"], 3)
        return web.json_response(body)

    async def _clients(self, request: web.Request, admin: str) -> web.StreamResponse:
        search = request.query.get("search", "")
        clients = sorted(
            (c for c in self._view.rooms.sessions.clients if c.session is not None),
            key=lambda c: c.client_id,
        )
        found = [
            c
            for c in clients
            if not search or any(search in f for f in (c.client_id, c.user_id, c.peer))
        ]
        registry = self._view.rooms.registry
        return _page(request, "clients", found, lambda c: client_json(c, registry))

    def _connected(self, request: web.Request) -> Client | web.Response:
        """The connected client the path names, or 404."""
        client_id = request.match_info["client_id"]
        session = self._view.rooms.sessions.by_id.get(client_id)
        if session is None or session.client is None:
            return json_error(404, f"no client {client_id!r} is connected")
        return session.client

    async def _client(self, request: web.Request, admin: str) -> web.StreamResponse:
        client = self._connected(request)
        if isinstance(client, web.Response):
            return client
        registry = self._view.rooms.registry
        body = client_json(client, registry)
        body["subscription_list"] = [
            subscription_json(s) for s in registry.of_queue(client.client_id)
        ]
        return web.json_response(body)

    async def _disconnect(self, request: web.Request, admin: str) -> web.StreamResponse:
        client = self._connected(request)
        if isinstance(client, web.Response):
            return client
        client_id = client.client_id
        log.info("admin %r: disconnected client %r (%s)", admin, client_id, client.peer)
        client.close(f"disconnected by administrator {admin!r}", ReasonCode.ADMINISTRATIVE_ACTION)
        return web.Response(status=204)

    async def _sessions(self, request: web.Request, admin: str) -> web.StreamResponse:
        search = request.query.get("search", "")
        sessions = sorted(self._view.rooms.sessions.by_id.values(), key=lambda s: s.client_id)
        found = [s for s in sessions if not search or search in s.client_id or search in s.user_id]
        registry = self._view.rooms.registry
        return _page(request, "sessions", found, lambda s: session_json(s, registry))

    # -- subscriptions ------------------------------------------------------------------

    async def _subscriptions(self, request: web.Request, admin: str) -> web.StreamResponse:
        search = request.query.get("search", "")
        client_id = request.query.get("client_id")
        registry = self._view.rooms.registry
        subscriptions = registry.of_queue(client_id) if client_id is not None else list(registry)
        found = sorted(
            (
                s
                for s in subscriptions
                if not search
                or any(search in f for f in (s.topic, s.name, s.identity.queue, s.filter_text))
            ),
            key=lambda s: s.id,
        )
        return _page(request, "subscriptions", found, subscription_json)

    # -- retained messages --------------------------------------------------------------

    async def _retained_list(self, request: web.Request, admin: str) -> web.StreamResponse:
        sub_point, problem = self._sub_point(request)
        if problem is not None:
            return problem
        topic_filter = request.query.get("topic", "#")
        invalid = topic_filter_error(topic_filter)
        if invalid is not None:
            return json_error(400, f"topic {topic_filter!r} is not a topic filter: {invalid}")
        messages = self._view.rooms.retained.matching(sub_point, topic_filter)
        found = sorted(messages, key=lambda m: m.topic)
        return _page(request, "retained", found, retained_json)

    async def _retained_one(self, request: web.Request, admin: str) -> web.StreamResponse:
        sub_point, problem = self._sub_point(request)
        if problem is not None:
            return problem
        topic = request.match_info["topic"]
        message = self._view.rooms.retained.get(sub_point, topic)
        if message is None:
            return json_error(404, f"no retained message on {topic!r}")
        return web.json_response(retained_json(message))

    async def _retained_delete(self, request: web.Request, admin: str) -> web.StreamResponse:
        sub_point, problem = self._sub_point(request)
        if problem is not None:
            return problem
        topic = request.match_info["topic"]
        if not self._operations.delete_retained(sub_point, topic):
            return json_error(404, f"no retained message on {topic!r}")
        log.info(
            "admin %r: deleted the retained message on %r (sub point %r)", admin, topic, sub_point
        )
        await self._durable()
        return web.Response(status=204)

    def _sub_point(self, request: web.Request) -> tuple[str, web.Response | None]:
        sub_point = request.query.get("sub_point", "")
        if sub_point not in self._view.rooms.sub_points:
            return sub_point, json_error(404, f"no subscription point {sub_point!r}")
        return sub_point, None

    # -- publish, journal ----------------------------------------------------------------

    async def _publish(self, request: web.Request, admin: str) -> web.StreamResponse:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return json_error(400, "the body must be a JSON object")
        if not isinstance(body, dict):
            return json_error(400, "the body must be a JSON object")
        parsed = _publication(body)
        if isinstance(parsed, str):
            return json_error(400, parsed)
        topic, payload, qos, retain, sub_point = parsed
        if topic.startswith("$"):
            return json_error(400, f"topic {topic!r}: topics starting with $ are the broker's")
        try:
            self._operations.publish(topic, payload, qos, retain, sub_point)
        except ValueError as error:
            return json_error(400, str(error))
        log.info(
            "admin %r: published %d bytes on %r (QoS %d%s)",
            admin, len(payload), topic, qos, ", retained" if retain else "",
        )  # fmt: skip
        await self._durable()
        return web.json_response({"topic": topic, "qos": qos, "retain": retain})

    async def _durable(self) -> None:
        """Return once what the request changed is committed (as an acknowledgement is)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def committed() -> None:
            if not done.done():  # the request may have been cancelled meanwhile
                done.set_result(None)

        self._view.rooms.committer.after(committed)
        self._view.rooms.committer.schedule()
        await done

    async def _journal(self, request: web.Request, admin: str) -> web.StreamResponse:
        view = self._view
        first, last = await read_journal(self._journal_readers, lambda reader: reader.bounds())
        try:
            offsets = await asyncio.get_running_loop().run_in_executor(
                view.executor, view.store.consumer_offsets
            )
        except StoreError as error:
            return json_error(503, f"the consumers cannot be read: {error}")
        now = time.time_ns() // 1000
        consumers = [offset_json(o, now) for o in offsets]
        return web.json_response({"first": first, "last": last, "consumers": consumers})


def _publication(body: dict[str, Any]) -> tuple[str, bytes, int, bool, str] | str:
    """The publication a POST /publish body asks for, or what is wrong with it."""
    topic = body.get("topic")
    if not isinstance(topic, str) or not topic:
        return "topic must be a non-empty string"
    text, encoded = body.get("payload"), body.get("payload_base64")
    if text is not None and encoded is not None:
        return "give payload or payload_base64, not both"
    if encoded is not None:
        if not isinstance(encoded, str):
            return "payload_base64 must be a string"
        try:
            payload = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return "payload_base64 is not base64"
    elif text is None or isinstance(text, str):
        payload = (text or "").encode("utf-8")
    else:
        return "payload must be a string"
    qos, retain, sub_point = (
        body.get("qos", 0),
        body.get("retain", False),
        body.get("sub_point", ""),
    )
    if qos not in (0, 1, 2) or isinstance(qos, bool):
        return "qos must be 0, 1 or 2"
    if not isinstance(retain, bool):
        return "retain must be true or false"
    if not isinstance(sub_point, str):
        return "sub_point must be a string"
    unknown = set(body) - {"topic", "payload", "payload_base64", "qos", "retain", "sub_point"}
    if unknown:
        return f"unknown fields: {', '.join(sorted(unknown))}"
    return topic, payload, qos, retain, sub_point


def _page(
    request: web.Request, key: str, items: Sequence[T], shape: Callable[[T], dict[str, Any]]
) -> web.StreamResponse:
    """One page of `items` (`limit`, `offset`) under `key`, with their `total`."""
    try:
        limit = int(request.query.get("limit", DEFAULT_LIMIT))
        offset = int(request.query.get("offset", 0))
    except ValueError:
        return json_error(400, "limit and offset must be integers")
    if not 0 < limit <= MAX_LIMIT or offset < 0:
        return json_error(400, f"limit must be 1 to {MAX_LIMIT} and offset at least 0")
    page: Iterable[T] = items[offset : offset + limit]
    return web.json_response({"total": len(items), key: [shape(item) for item in page]})
