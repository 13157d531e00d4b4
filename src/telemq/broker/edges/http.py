"""The broker's HTTP listeners (`[[http]]`): the journal service and MQTT over WebSockets,
over aiohttp.

Theory of operation
-------------------
An `HttpServer` runs an aiohttp application on each configured `[[http]]` listener, plain
or TLS (the MQTT listeners' settings and checks). It is the broker's second front door: the
Spark pipeline reads the journal through it, so executors on other hosts never open the
broker's files (docs/pipeline.md, "The journal service"), and browsers connect to MQTT on
the listener's `websocket_paths` (websockets.py, docs/websockets.md), which HTTP
authentication leaves to MQTT's CONNECT.

Every request is authenticated with the broker's own users, by HTTP Basic: the hooks'
`authenticate`, on a worker thread when the hooks say it is slow, as for CONNECT (a key
derivation takes a while). No
credentials is the anonymous user, accepted exactly where MQTT accepts anonymous clients. A
wrong password is 401 with a `WWW-Authenticate` challenge; a known user the ACL does not let
read what it asks for is 403 (the `journal` action, checked like a subscription: the rules must
cover every topic filter of the request). Nothing is read before both checks pass.

What else the listeners serve plugs in through `HttpRoutes`, behind the same
authentication (web.py assembles them: `/metrics`, metrics.py); the handlers find the user
under `USER` and answer errors with `json_error`.

Every error is JSON, ``{"error": "..."}``: see http_errors.py.

Reads go to a read-only connection to the store (`store.JournalReaders`: the SQLite file,
opened per request, or a connection of a pool to the PostgreSQL database, shared by the
requests) on a worker thread, never on the event loop, so a slow read delays only its own
request.

Endpoints (all JSON, errors as ``{"error": "..."}``):

- ``GET /journal/v1/bounds[?topic=F...]``: ``{"first": N, "last": M}``, the first seq still
  in the journal and the last committed (``first = last + 1`` when it is empty).
- ``GET /journal/v1/range?from=A&to=B[&topic=F...]``: the rows ``A <= seq <= B`` (``B``
  past the last committed seq stops there), in seq order, those of the topic filters only
  when some are given, as an Arrow IPC stream (``application/vnd.apache.arrow.stream``) of
  record batches with the data source's schema (`journal.arrow.JOURNAL_SCHEMA`). A range
  that starts before the first seq still in the journal is 410 (retention deleted it: the
  data source's ``failOnDataLoss``). Batches are read one at a time on a thread of the
  request's own, one batch ahead of the socket: the next is read while the previous one is
  written, and no further, so a slow reader holds back its own stream and nothing else.
- ``GET /journal/v1/consumers``: ``{"consumers": [...]}``, the offsets the caller committed
  (an administrator sees every user's), each ``{"name", "owner", "committed_seq",
  "running", "updated_us", "live"}``.
- ``PUT /journal/v1/consumers/{name}`` with ``{"committed_seq": N | null, "running": bool,
  "topics": [F...]}``: a streaming query's offset, kept in the store (`ConsumerOffset`) so
  that retention never deletes what a live query has not committed. ``null`` keeps the
  committed seq (a heartbeat). The caller must be allowed to read the topics (default
  ``#``): holding retention back is a reader's right, not any user's. A name belongs to the
  user who wrote it first (403 for anyone else); `MAX_CONSUMERS_PER_USER` per user (429).
- ``DELETE /journal/v1/consumers/{name}``: 204, or 404 when there is none.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import io
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from ...journal import ARROW_STREAM_TYPE
from ...protocol.topics import topic_filter_error
from ...store import (
    ConsumerOffset,
    JournalLocation,
    JournalReaders,
    JournalReading,
    Store,
    StoreError,
    consumers,
)
from ..settings.config import HttpConfig
from ..settings.tls import server_context
from .http_errors import MAX_BODY, HttpProtocol, json_error, json_errors

log = logging.getLogger("telemq.http")

Authenticate = Callable[[str | None, bytes | None], bool]  # user, password -> accepted
MayRead = Callable[[str, str], bool]  # user ("" anonymous), topic filter -> allowed
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REALM = 'Basic realm="telemq", charset="UTF-8"'
MAX_CONSUMERS_PER_USER = 256
MAX_SEQ = 2**63 - 1  # the store's integers are SQLite's, 64-bit signed
# No access log, as `AppRunner(access_log=None)` (aiohttp's annotation admits only a Logger).
_NO_ACCESS_LOG: dict[str, Any] = {"access_log": None}
USER = web.RequestKey("user", str)  # the authenticated user of a request ("" anonymous)
# The paths of an application that HTTP authentication leaves alone (MQTT over WebSockets,
# `HttpRoutes.open_paths`), and the prefixes of those under which every path is.
OPEN_PATHS = web.AppKey("open_paths", frozenset[str])
OPEN_PREFIXES = web.AppKey("open_prefixes", tuple[str, ...])
_CONSUMER_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")


@dataclass(frozen=True, slots=True)
class HttpAuth:
    """The broker's users, as the HTTP listeners see them (the hooks behind the callables).

    `off_loop`: run `authenticate` on a worker thread (the hooks say whether it is slow and
    safe there, as for CONNECT)."""

    authenticate: Authenticate
    may_read: MayRead
    is_admin: Callable[[str], bool]
    off_loop: bool = True


class HttpRoutes(Protocol):
    """More of the broker behind its HTTP listeners (`/metrics`, `/api/v1`, the dashboard):
    the seam each plugs into. Handlers find the authenticated user under `USER`."""

    # Paths HTTP authentication leaves alone (what holds no data: a page, a schema); one
    # ending in "/*" stands for every path under it.
    open_paths: tuple[str, ...]

    def install(self, app: web.Application) -> None:
        """Add the routes to one listener's application."""


def _unavailable(message: str) -> web.HTTPServiceUnavailable:
    """503, raised from deep in a read; `json_errors` answers it as JSON."""
    return web.HTTPServiceUnavailable(text=message)


NO_JOURNAL = "the journal service needs the sqlite store or the postgres store"


async def read_journal(
    readers: JournalReaders | None, work: Callable[[JournalReading], Any]
) -> Any:
    """`work` on a reader of `readers` (the sqlite store's directory, the postgres store's
    database; None: the memory store), on a worker thread; 503 when it cannot be read."""
    if readers is None:
        raise _unavailable(NO_JOURNAL)

    def run() -> Any:
        with readers.open() as reader:
            return work(reader)

    try:
        return await asyncio.get_running_loop().run_in_executor(None, run)
    except StoreError as error:
        raise _unavailable(f"the journal cannot be read: {error}") from None


class HttpServer:
    """The `[[http]]` listeners of one broker (see module docstring)."""

    def __init__(
        self,
        configs: list[HttpConfig],
        auth: HttpAuth,
        store: Store,
        store_executor: Executor | None,
        journal: JournalLocation | JournalReaders | None,
        websocket: Callable[[HttpConfig], Handler] | None = None,
        routes: Sequence[HttpRoutes] = (),
    ) -> None:
        """`journal`: where the store's journal is (the sqlite store's data directory, the
        postgres store's database, or the readers of either, which `stop` closes), or None
        for the memory store: the journal endpoints then answer 503. `store_executor`: the
        store's own thread, which the consumer offsets are written on (None: inline).
        `websocket`: the handler of a listener's `websocket_paths` (websockets.py); `routes`:
        what else the listeners serve."""
        self._configs = configs
        self._auth = auth
        self._store = store
        self._store_executor = store_executor
        if journal is None or isinstance(journal, JournalReaders):
            self.journal = journal
        else:
            self.journal = JournalReaders(journal)
        self._websocket = websocket
        self._routes = routes
        self._runners: list[web.AppRunner] = []
        self._servers: list[asyncio.Server] = []
        self.ports: list[int] = []

    def application(self, config: HttpConfig | None = None) -> web.Application:
        """One listener's application: the journal service, and MQTT over WebSockets on the
        listener's `websocket_paths` (their own authentication: MQTT's CONNECT)."""
        app = web.Application(
            client_max_size=MAX_BODY, middlewares=[json_errors, self._authenticated]
        )
        paths = config.websocket_paths if config is not None and self._websocket else []
        opened = [path for routes in self._routes for path in routes.open_paths]
        app[OPEN_PATHS] = frozenset([*paths, *opened])
        app[OPEN_PREFIXES] = tuple(path[:-1] for path in opened if path.endswith("/*"))
        if config is not None and self._websocket is not None and paths:
            handler = self._websocket(config)
            for path in paths:
                app.router.add_get(path, handler)
        app.router.add_get("/journal/v1/bounds", self._bounds)
        app.router.add_get("/journal/v1/range", self._range)
        app.router.add_get("/journal/v1/consumers", self._list_consumers)
        app.router.add_put("/journal/v1/consumers/{name}", self._put_consumer)
        app.router.add_delete("/journal/v1/consumers/{name}", self._delete_consumer)
        for routes in self._routes:
            routes.install(app)
        return app

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for index, config in enumerate(self._configs):
            runner = web.AppRunner(self.application(config), access_log=None)
            await runner.setup()
            self._runners.append(runner)
            manager = runner.server
            assert manager is not None  # set up above

            def connection(manager: web.Server = manager) -> HttpProtocol:
                return HttpProtocol(manager, loop=loop, **_NO_ACCESS_LOG)

            context = server_context(config.tls_listener(), f"http[{index}]")
            server = await loop.create_server(
                connection, config.host, config.port, ssl=context, backlog=128
            )
            self._servers.append(server)
            sockets = list(server.sockets or ())  # uvloop's is a list, its stub says tuple
            port = sockets[0].getsockname()[1] if sockets else config.port
            self.ports.append(port)
            scheme = "https" if context is not None else "http"
            log.info("journal service on %s://%s:%d", scheme, config.host, port)
            if self._websocket is not None and config.websocket_paths:
                log.info(
                    "MQTT over WebSockets on %s://%s:%d%s (sub point %r)",
                    "wss" if context is not None else "ws",
                    config.host,
                    port,
                    ", ".join(config.websocket_paths),
                    config.sub_point,
                )

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()  # no new connections; the runners end the open ones
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()
        if self.journal is not None:  # the pool's connections, once no request reads
            await asyncio.get_running_loop().run_in_executor(None, self.journal.close)

    # -- authentication and authorization ---------------------------------------

    @web.middleware
    async def _authenticated(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path in request.app[OPEN_PATHS] or path.startswith(request.app[OPEN_PREFIXES]):
            return await handler(request)  # MQTT over WebSockets: CONNECT authenticates
        header = request.headers.get("Authorization")
        user: str | None = None
        password: bytes | None = None
        if header is not None:
            scheme, _, encoded = header.partition(" ")
            if scheme.lower() != "basic":
                return json_error(
                    401, "only HTTP Basic authentication is supported", **_challenge()
                )
            try:
                decoded = base64.b64decode(encoded.strip(), validate=True)
                name, separator, secret = decoded.partition(b":")
                if not separator:
                    raise ValueError("no colon")
                user = name.decode("utf-8")
                password = secret
            except (binascii.Error, ValueError):
                return json_error(401, "malformed Basic credentials", **_challenge())
        authenticate = self._auth.authenticate
        if self._auth.off_loop:
            loop = asyncio.get_running_loop()
            accepted = await loop.run_in_executor(None, authenticate, user, password)
        else:
            accepted = authenticate(user, password)
        if not accepted:
            problem = "anonymous access is off" if user is None else "bad user name or password"
            return json_error(401, problem, **_challenge())
        request[USER] = user or ""
        return await handler(request)

    def _topics(self, request: web.Request) -> list[str]:
        return request.query.getall("topic", []) or ["#"]

    def _refused(self, request: web.Request, topics: list[str]) -> web.Response | None:
        """400 for a topic that is no filter, 403 for one the user may not read."""
        user: str = request[USER]
        for topic in topics:
            problem = topic_filter_error(topic)
            if problem is not None:
                return json_error(400, f"topic {topic!r} is not a topic filter: {problem}")
            if not self._auth.may_read(user, topic):
                log.info("journal read of %r by %r denied", topic, user or "anonymous")
                return json_error(403, f"not authorized to read the journal on {topic!r}")
        return None

    # -- the journal ---------------------------------------------------------------

    async def _read(self, work: Callable[[JournalReading], Any]) -> Any:
        return await read_journal(self.journal, work)

    async def _bounds(self, request: web.Request) -> web.StreamResponse:
        refused = self._refused(request, self._topics(request))
        if refused is not None:
            return refused
        first, last = await self._read(lambda reader: reader.bounds())
        return web.json_response({"first": first, "last": last})

    async def _range(self, request: web.Request) -> web.StreamResponse:
        topics = request.query.getall("topic", [])
        refused = self._refused(request, topics or ["#"])
        if refused is not None:
            return refused
        try:
            first = int(request.query["from"])
            last = int(request.query["to"])
        except (KeyError, ValueError):
            return json_error(400, "from and to must be given, as sequence numbers")
        if first < 1 or last < first - 1:
            return json_error(400, f"from {first} and to {last} make no range")
        if self.journal is None:
            raise _unavailable(NO_JOURNAL)
        stream = _RangeStream(self.journal, first, last, topics)
        ahead: asyncio.Future[bytes | None] | None = None
        try:
            problem = await stream.open()
            if problem is not None:
                return json_error(410, problem)
            response = web.StreamResponse(headers={"Content-Type": ARROW_STREAM_TYPE})
            await response.prepare(request)
            ahead = asyncio.ensure_future(stream.next_bytes())
            while (chunk := await ahead) is not None:
                # The next batch is read while this one goes out: one batch ahead, no more.
                ahead = asyncio.ensure_future(stream.next_bytes())
                await response.write(chunk)  # waits while the client is not reading
            await response.write_eof()
            return response
        finally:
            if ahead is not None and not ahead.done():
                ahead.cancel()
                with contextlib.suppress(BaseException):
                    await ahead
            stream.close()

    # -- consumer offsets --------------------------------------------------------------

    async def _on_store(self, work: Callable[[], Any]) -> Any:
        """`work` on the store's thread, after any commit in progress (never racing one)."""
        try:
            if self._store_executor is None:
                return work()
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._store_executor, work)
        except StoreError as error:
            raise _unavailable(f"consumer offsets cannot be kept: {error}") from None

    async def _list_consumers(self, request: web.Request) -> web.StreamResponse:
        user: str = request[USER]
        every = self._auth.is_admin(user) if user else False
        offsets: list[ConsumerOffset] = await self._on_store(self._store.consumer_offsets)
        now = time.time_ns() // 1000
        listed = [offset_json(o, now) for o in offsets if every or o.owner == user]
        return web.json_response({"consumers": listed})

    async def _put_consumer(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if not _CONSUMER_NAME.fullmatch(name):
            return json_error(400, "a consumer name is 1 to 200 of A-Z a-z 0-9 . _ -")
        try:
            body = await request.json()
        except ValueError:
            return json_error(400, "the body must be a JSON object")
        if not isinstance(body, dict):
            return json_error(400, "the body must be a JSON object")
        committed = body.get("committed_seq")
        running = body.get("running", True)
        topics = body.get("topics", ["#"])
        if committed is not None and (type(committed) is not int or not 0 <= committed <= MAX_SEQ):
            return json_error(
                400, f"committed_seq must be a seq (an integer from 0 to {MAX_SEQ}) or null"
            )
        if not isinstance(running, bool):
            return json_error(400, "running must be true or false")
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            return json_error(400, "topics must be a list of topic filters")
        refused = self._refused(request, topics or ["#"])
        if refused is not None:
            return refused
        user: str = request[USER]

        def put() -> ConsumerOffset | web.Response:
            offsets = self._store.consumer_offsets()
            old = next((o for o in offsets if o.name == name), None)
            if old is not None and old.owner != user:
                return json_error(403, f"consumer {name!r} belongs to another user")
            if old is None and sum(o.owner == user for o in offsets) >= MAX_CONSUMERS_PER_USER:
                return json_error(429, f"at most {MAX_CONSUMERS_PER_USER} consumers per user")
            seq = committed if committed is not None or old is None else old.committed_seq
            offset = ConsumerOffset(name, user, seq, running, time.time_ns() // 1000)
            self._store.put_consumer_offset(offset)
            return offset

        result = await self._on_store(put)
        if isinstance(result, web.Response):
            return result
        return web.json_response(offset_json(result, result.updated_us))

    async def _delete_consumer(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        user: str = request[USER]

        def delete() -> int:
            old = next((o for o in self._store.consumer_offsets() if o.name == name), None)
            if old is None:
                return 404
            if old.owner != user and not (user and self._auth.is_admin(user)):
                return 403
            self._store.delete_consumer_offset(name)
            return 204

        status = await self._on_store(delete)
        if status == 404:
            return json_error(404, f"no consumer {name!r}")
        if status == 403:
            return json_error(403, f"consumer {name!r} belongs to another user")
        return web.Response(status=204)


def offset_json(offset: ConsumerOffset, now_us: int) -> dict[str, Any]:
    return {
        "name": offset.name,
        "owner": offset.owner,
        "committed_seq": offset.committed_seq,
        "running": offset.running,
        "updated_us": offset.updated_us,
        "live": consumers.offset_is_live(offset, now_us),
    }


class _RangeStream:
    """One range of the journal as Arrow IPC bytes, read on a thread of its own (the
    store's connection stays on the thread that opened it)."""

    def __init__(self, readers: JournalReaders, first: int, last: int, topics: list[str]) -> None:
        self._readers = readers
        self._first = first
        self._last = last
        self._topics = topics
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="telemq-journal-range")
        self._reader: JournalReading | None = None
        self._batches: Iterator[Any] | None = None
        self._sink = io.BytesIO()
        self._writer: Any = None

    async def open(self) -> str | None:
        """None when the range can be read; else why not (retention deleted part of it)."""
        problem: str | None = await self._run(self._open)
        return problem

    def _open(self) -> str | None:
        import pyarrow as pa  # type: ignore[import-untyped]

        from ...journal.arrow import JOURNAL_SCHEMA, TopicMatcher, read_range

        reader = self._reader = self._readers.open()
        low, high = reader.bounds()
        if self._first < low:
            return (
                f"seqs {self._first} to {low - 1} were deleted by journal retention "
                f"(the first seq still in the journal is {low})"
            )
        matcher = TopicMatcher(tuple(self._topics)) if self._topics else None
        self._batches = read_range(reader, self._first, min(self._last, high), topics=matcher)
        self._writer = pa.ipc.new_stream(self._sink, JOURNAL_SCHEMA)
        return None

    async def next_bytes(self) -> bytes | None:
        """The next part of the stream (the schema comes with the first), None at the end."""
        chunk: bytes | None = await self._run(self._next)
        return chunk

    def _next(self) -> bytes | None:
        if self._writer is None:
            return None
        assert self._batches is not None
        batch = next(self._batches, None)
        if batch is None:
            self._writer.close()  # the end-of-stream marker
            self._writer = None
        else:
            self._writer.write_batch(batch)
        data = self._sink.getvalue()
        self._sink.seek(0)
        self._sink.truncate()
        return data

    async def _run(self, work: Callable[[], Any]) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, work)
        except StoreError as error:
            raise _unavailable(f"the journal cannot be read: {error}") from None
        except ImportError:
            raise _unavailable("journal ranges need pyarrow: pip install 'telemq[spark]'") from None

    def close(self) -> None:
        def release() -> None:
            if self._reader is not None:
                self._reader.close()

        self._thread.submit(release)
        self._thread.shutdown(wait=False)


def _challenge() -> dict[str, str]:
    return {"WWW-Authenticate": REALM}
