"""Every error of the HTTP listener is JSON (docs/operations.md, "Errors"): the routes' own
answers, and those aiohttp gives by itself (no route 404, a method the route does not take
405 with its `Allow`, a body over the limit 413, a request it cannot parse 400, an unknown
`Expect` 417), each ``{"error": ...}`` with a message naming the problem, as
`application/json`; an exception no handler expected is a 500 saying nothing of the broker's
inside, with the traceback in the log. The dashboard's static files still come as they are,
conditional requests included.

A broker subprocess with users (one an administrator) and a real HTTP client (the standard
library's `urllib`, raw sockets for what `urllib` will not send); the 500 needs a hook that
fails, so it runs against a broker embedded in the test process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from aiohttp import web
from multidict import CIMultiDict as CaseInsensitiveDict

from telemq.broker import Broker, BrokerConfig, Hook
from telemq.broker.edges.http import HttpAuth, HttpServer
from telemq.broker.security.acl import Action
from telemq.broker.settings.config import HttpConfig
from telemq.store import MemoryStore
from testsupport.process import users_and_acl

from .helpers import BrokerProcess, free_port

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

PASSWORDS = {"root": "root-pw-1", "app": "app-pw-2"}
ACL = [("app", "journal", "#", True), ("app", "subscribe", "#", True)]
LIMIT = 1024 * 1024  # the listener's request body limit
Answer = tuple[int, Mapping[str, str], bytes]  # status, headers (any case), body


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The HTTP listener of a broker with users `root` (an administrator) and `app`."""
    http_port = free_port()
    broker = BrokerProcess(
        tmp_path_factory.mktemp("http-errors"),
        config_text="[sys]\ninterval = 0\n" + users_and_acl(PASSWORDS, ACL, admins={"root"}),
        args=["--http-port", str(http_port)],
    )
    broker.start()
    yield f"http://127.0.0.1:{http_port}"
    broker.finalize()


def call(
    url: str,
    method: str = "GET",
    *,
    user: str | None = "root",
    password: str | None = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if user is not None:
        secret = password if password is not None else PASSWORDS[user]
        token = base64.b64encode(f"{user}:{secret}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, CaseInsensitiveDict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, CaseInsensitiveDict(error.headers), error.read()


def error_of(answer: Answer, status: int) -> str:
    """The message of a JSON error answer with `status` (anything else fails the test)."""
    got, headers, body = answer
    assert got == status, answer
    assert headers["Content-Type"].split(";")[0] == "application/json", answer
    document = json.loads(body)
    assert list(document) == ["error"] and isinstance(document["error"], str), document
    message: str = document["error"]
    return message


def raw(base: str, request: bytes, *, then: bytes = b"", pause: float = 0.0) -> Answer:
    """Send `request` bytes on a socket of their own (then `then`, after `pause` seconds),
    and parse the one answer."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(request)
        if then:
            time.sleep(pause)
            connection.sendall(then)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = connection.recv(65536)
            assert chunk, received
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.split(": ", 1) for line in lines[1:])
        while len(body) < int(fields.get("Content-Length", "0")):
            chunk = connection.recv(65536)
            assert chunk, received
            body += chunk
    return int(lines[0].split()[1]), CaseInsensitiveDict(fields), body


def test_a_path_without_a_route_is_404_naming_it(base: str) -> None:
    message = error_of(call(f"{base}/api/v1/no-such-route"), 404)
    assert message == "no route GET /api/v1/no-such-route"
    message = error_of(call(f"{base}/journal/v2/bounds", "DELETE", user="app"), 404)
    assert message == "no route DELETE /journal/v2/bounds"


def test_a_method_the_route_does_not_take_is_405_with_allow(base: str) -> None:
    answer = call(f"{base}/api/v1/publish", "PUT", data=b"{}")
    message = error_of(answer, 405)
    assert message == "method PUT not allowed on /api/v1/publish; allowed: POST"
    assert answer[1]["Allow"] == "POST"
    for method, path, allowed in [
        ("POST", "/journal/v1/bounds", "GET, HEAD"),
        ("PATCH", "/journal/v1/consumers/x", "DELETE, PUT"),
        ("POST", "/metrics", "GET, HEAD"),
        ("POST", "/mqtt", "GET, HEAD"),  # the WebSocket path
        ("DELETE", "/dashboard/app.js", "GET, HEAD"),
    ]:
        answer = call(base + path, method, user="app", data=b"")
        message = error_of(answer, 405)
        assert message == f"method {method} not allowed on {path}; allowed: {allowed}", answer
        assert sorted(answer[1]["Allow"].split(",")) == allowed.split(", ")


def test_a_body_over_the_limit_is_413_naming_both_sizes(base: str) -> None:
    body = b'{"topic": "t", "payload": "' + b"x" * (2 * LIMIT) + b'"}'
    json_type = {"Content-Type": "application/json"}
    message = error_of(call(f"{base}/api/v1/publish", "POST", data=body, headers=json_type), 413)
    assert message == (
        f"request body of {len(body)} bytes is larger than the limit of {LIMIT} bytes"
    )
    consumer = f"{base}/journal/v1/consumers/big"
    message = error_of(call(consumer, "PUT", user="app", data=body, headers=json_type), 413)
    assert message.startswith(f"request body of {len(body)} bytes is larger than the limit")


def test_what_aiohttp_answers_before_any_route_is_json_too(base: str) -> None:
    auth = base64.b64encode(b"app:" + PASSWORDS["app"].encode())
    message = error_of(raw(base, b"GET /x y z HTTP/1.1\r\nHost: h\r\n\r\n"), 400)
    assert message.startswith("malformed HTTP request: Bad status line"), message
    head = b"PUT /journal/v1/consumers/c HTTP/1.1\r\nHost: h\r\nAuthorization: Basic " + auth
    head += b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    message = error_of(raw(base, head + b"zz\r\n{}\r\n0\r\n\r\n"), 400)
    assert message.startswith("malformed HTTP request: Invalid character in chunk size"), message
    # A body that says it is gzip and is not: found as the handler reads it.
    head = head.replace(b"Transfer-Encoding: chunked", b"Content-Encoding: gzip")
    message = error_of(
        raw(base, head.replace(b"\r\n\r\n", b"\r\nContent-Length: 9\r\n\r\n") + b"not gzip!"), 400
    )
    assert message.startswith("the request body could not be read"), message
    long_header = b"GET /metrics HTTP/1.1\r\nHost: h\r\nX-Long: " + b"a" * 10000 + b"\r\n\r\n"
    message = error_of(raw(base, long_header), 400)
    assert message.startswith("malformed HTTP request: Got more than 8190 bytes"), message
    expect = b"GET /metrics HTTP/1.1\r\nHost: h\r\nExpect: telepathy\r\nConnection: close\r\n\r\n"
    assert error_of(raw(base, expect), 417) == "Unknown Expect: telepathy"


def test_the_routes_own_errors_are_json(
    base: str, broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """A sweep over the routes' answers, each status the listener gives."""
    cases: list[tuple[Answer, int, str]] = [
        (call(f"{base}/api/v1/clients?limit=0"), 400, "limit must be 1 to 1000"),
        (call(f"{base}/mqtt", user=None), 400, "serves MQTT over WebSockets"),
        (call(f"{base}/journal/v1/range?from=x", user="app"), 400, "from and to must be given"),
        (call(f"{base}/journal/v1/bounds?topic=a/%23/b", user="app"), 400, "not a topic filter"),
        (
            call(
                f"{base}/journal/v1/consumers/c",
                "PUT",
                user="app",
                data=json.dumps({"committed_seq": 2**70}).encode(),
            ),
            400,
            "committed_seq must be a seq (an integer from 0 to 9223372036854775807) or null",
        ),
        (call(f"{base}/api/v1/overview", user=None), 401, "anonymous access is off"),
        (call(f"{base}/metrics", password="wrong"), 401, "bad user name or password"),
        (
            call(f"{base}/metrics", user=None, headers={"Authorization": "Bearer abc"}),
            401,
            "only HTTP Basic authentication is supported",
        ),
        (call(f"{base}/api/v1/overview", user="app"), 403, "for administrators, not 'app'"),
        (call(f"{base}/api/v1/clients/nobody"), 404, "no client 'nobody' is connected"),
        (call(f"{base}/dashboard/nothing.js", user=None), 404, "no file 'nothing.js'"),
        (call(f"{base}/journal/v1/consumers/none", "DELETE", user="app"), 404, "no consumer"),
    ]
    memory = tmp_path / "memory.toml"
    memory.write_text('[store]\nkind = "memory"\n', encoding="utf-8")
    http_port = free_port()
    broker_factory("--http-port", str(http_port), config=memory)
    bounds = call(f"http://127.0.0.1:{http_port}/journal/v1/bounds", user=None)
    cases.append((bounds, 503, "the journal service needs the sqlite store"))
    for answer, status, words in cases:
        assert words in error_of(answer, status), (answer, words)


def test_the_dashboards_files_are_still_served(base: str) -> None:
    status, headers, body = call(f"{base}/", user=None)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert body.startswith(b"<!doctype html>")
    status, headers, _ = call(f"{base}/dashboard/app.js", user=None)
    assert status == 200 and headers["Content-Type"] == "text/javascript; charset=utf-8"
    status, _, _ = call(f"{base}/dashboard/app.js", user=None, headers={"If-None-Match": "x"})
    assert status == 200
    status, _, body = call(
        f"{base}/dashboard/app.js", user=None, headers={"If-None-Match": headers["ETag"]}
    )
    assert (status, body) == (304, b"")
    status, headers, body = call(f"{base}/api/v1/openapi.json", user=None)
    assert status == 200 and json.loads(body)["openapi"].startswith("3.1")


class FailingHook(Hook):
    """A hook with a bug: it fails whenever the journal's readers are checked."""

    def authorize(self, action: Action, topic: str, user_id: str, client_id: str) -> bool | None:
        if action is Action.JOURNAL:
            raise RuntimeError("the hook's secret database is down")
        return None


def test_an_exception_no_handler_expected_is_a_generic_500_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = BrokerConfig(http=[HttpConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0
    hooks = [FailingHook()]

    async def main() -> Answer:
        async with Broker(config, store=MemoryStore(), hooks=hooks, listeners=[]) as broker:
            assert broker.http is not None
            url = f"http://127.0.0.1:{broker.http.ports[0]}/journal/v1/bounds"
            return await asyncio.to_thread(call, url, user=None)

    with caplog.at_level(logging.ERROR, logger="telemq.http"):
        answer = asyncio.run(main())
    message = error_of(answer, 500)
    assert message == "internal error answering GET /journal/v1/bounds: see the broker's log"
    assert "secret" not in message
    failed = [r for r in caplog.records if r.getMessage() == "HTTP GET /journal/v1/bounds failed"]
    assert failed and failed[0].exc_info is not None
    assert "the hook's secret database is down" in str(failed[0].exc_info[1])


class BrokenStreams:
    """Routes whose answer fails half-way, as a journal range does when the store fails
    under it: after the first bytes, `/broken/503` raises the 503 the range raises, and
    `/broken/bug` an exception no one expected."""

    open_paths = ("/broken/*",)

    def install(self, app: web.Application) -> None:
        app.router.add_get("/broken/{how}", self._stream)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        await response.write(b"first part of the stream;")
        if request.match_info["how"] == "503":
            raise web.HTTPServiceUnavailable(text="the journal cannot be read: disk gone")
        raise RuntimeError("a bug half-way")


def test_an_answer_that_fails_half_way_is_cut_short_not_followed_by_another(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client must see a truncated stream, never an error answer inside the body."""

    async def main() -> dict[str, bytes]:
        server = HttpServer(
            [HttpConfig(host="127.0.0.1", port=0, websocket_paths=[])],
            HttpAuth(lambda user, password: True, lambda user, topic: True, lambda user: False),
            MemoryStore(),
            None,
            None,
            routes=[BrokenStreams()],
        )
        await server.start()
        try:
            received = {}
            for how in ("503", "bug"):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.ports[0])
                writer.write(f"GET /broken/{how} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
                received[how] = await asyncio.wait_for(reader.read(), 10)  # to the end
                writer.close()
            return received
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING, logger="telemq.http"):
        received = asyncio.run(main())
    for data in received.values():
        assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data
        assert data.count(b"HTTP/1.1") == 1 and b'"error"' not in data, data
        assert b"first part of the stream;" in data
        assert not data.endswith(b"0\r\n\r\n"), data  # no chunked end: cut short
    broken = [r for r in caplog.records if "broken off" in r.getMessage()]
    assert [r.levelno for r in broken] == [logging.WARNING, logging.ERROR]
    assert "disk gone" in broken[0].getMessage() and broken[1].exc_info is not None
