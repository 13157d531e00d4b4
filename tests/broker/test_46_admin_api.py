"""The admin REST API, `/api/v1` (docs/operations.md, "Admin API"), over HTTP against a
live broker: administrators only (401 and 403 as JSON), the clients a real MQTT client and a
WebSocket client make (listed, searched, detailed, disconnected with 0x98), sessions, MQ
named subscriptions with their identities and filters, retained messages (list, read,
delete), publish (and what it refuses), the journal and its consumers, every change logged
with the administrator's name; and the OpenAPI document, valid and naming every route."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from openapi_spec_validator import validate

from telemq.broker.operations.admin_api import OPENAPI, AdminApi
from testsupport.paho import MQTT5, MQTT311
from testsupport.process import users_and_acl

from .helpers import BrokerProcess, PahoClient, served_over_http, unique
from .test_25_security import command
from .test_41_mqtt5 import connect_properties

BrokerFactory = Callable[..., BrokerProcess]
PASSWORDS = {"root": "root-pw", "app": "app-pw"}
ACL = [("app", "all", "#", True), ("root", "all", "#", True)]
ADMIN_ACTION = 0x98
APP: dict[str, Any] = {"username": "app", "password": PASSWORDS["app"]}  # an MQTT client's


class Api:
    """`/api/v1` of one broker, as a user (None: no credentials)."""

    def __init__(self, port: int, user: str | None = "root", password: str | None = None) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1"
        self.auth: str | None = None
        if user is not None:
            secret = password if password is not None else PASSWORDS[user]
            self.auth = "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()

    def call(
        self, method: str, path: str, body: Any = None, **query: str
    ) -> tuple[int, Any, dict[str, str]]:
        """Status, JSON body (None when empty) and headers."""
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        if self.auth is not None:
            request.add_header("Authorization", self.auth)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None, dict(response.headers)
        except urllib.error.HTTPError as error:
            raw = error.read()
            return error.code, json.loads(raw) if raw else None, dict(error.headers)

    def get(self, path: str, **query: str) -> Any:
        status, body, _ = self.call("GET", path, **query)
        assert status == 200, (path, status, body)
        return body


@pytest.fixture
def served(broker_factory: BrokerFactory, tmp_path: Path) -> tuple[BrokerProcess, int]:
    return served_over_http(
        broker_factory, tmp_path, users_and_acl(PASSWORDS, ACL, admins={"root"})
    )


def test_administrators_only(served: tuple[BrokerProcess, int]) -> None:
    _, http_port = served
    status, body, headers = Api(http_port, None).call("GET", "/clients")
    assert status == 401 and "anonymous" in body["error"]
    assert headers["WWW-Authenticate"].startswith("Basic")
    status, body, _ = Api(http_port, "root", "wrong").call("GET", "/clients")
    assert status == 401 and "password" in body["error"]
    for method, path in [("GET", "/clients"), ("DELETE", "/clients/x"), ("POST", "/publish")]:
        status, body, _ = Api(http_port, "app").call(method, path, {"topic": "t"})
        assert status == 403, (method, path)
        assert body["error"] == "the admin API is for administrators, not 'app'"
    assert Api(http_port).get("/overview")["connections"] == 0


def test_clients_listed_searched_detailed_and_disconnected(
    served: tuple[BrokerProcess, int],
) -> None:
    broker, http_port = served
    api = Api(http_port)
    tcp = PahoClient(broker.port, unique("adm-tcp"), **APP)
    web_client = PahoClient(
        http_port, unique("adm-ws"), version=MQTT5, **APP,
        websocket_path="/mqtt", clean=False,
        properties=connect_properties(SessionExpiryInterval=600),
    )  # fmt: skip
    try:
        tcp.connect()
        web_client.connect()
        web_client.subscribe("adm/+/x", qos=1)
        listed = api.get("/clients")
        assert listed["total"] == 2
        by_id = {c["client_id"]: c for c in listed["clients"]}
        assert by_id[tcp.client_id]["transport"] == "tcp"
        assert by_id[tcp.client_id]["protocol"] == "3.1.1"
        assert by_id[web_client.client_id]["protocol"] == "5"
        assert by_id[web_client.client_id]["transport"] == "ws"
        assert by_id[web_client.client_id]["user"] == "app"
        assert by_id[web_client.client_id]["persistent"] is True
        assert by_id[web_client.client_id]["connected_at"].endswith("Z")
        assert by_id[web_client.client_id]["subscriptions"] == 1
        assert by_id[tcp.client_id]["subscriptions"] == 0
        found = api.get("/clients", search="adm-ws")
        assert [c["client_id"] for c in found["clients"]] == [web_client.client_id]
        page = api.get("/clients", limit="1", offset="1")
        assert page["total"] == 2 and len(page["clients"]) == 1
        status, body, _ = api.call("GET", "/clients", limit="0")
        assert status == 400 and "limit" in body["error"]
        details = api.get("/clients/" + urllib.parse.quote(web_client.client_id, safe=""))
        assert [s["topic"] for s in details["subscription_list"]] == ["adm/+/x"]
        assert details["subscription_list"][0]["kind"] == "mqtt"
        status, _, _ = api.call("DELETE", "/clients/" + web_client.client_id)
        assert status == 204
        web_client.wait_disconnected()
        assert web_client.disconnect_reasons[-1] == ADMIN_ACTION
        status, body, _ = api.call("DELETE", "/clients/" + web_client.client_id)
        assert status == 404 and "no client" in body["error"]
        # Its session stays, as its own expiry says: listed among the sessions.
        sessions = api.get("/sessions", search=web_client.client_id)["sessions"]
        assert [(s["connected"], s["persistent"]) for s in sessions] == [(False, True)]
        assert sessions[0]["subscriptions"] == 1
        assert sessions[0]["created_at"].endswith("Z")
    finally:
        tcp.close()
        web_client.close()
    assert f"admin 'root': disconnected client {web_client.client_id!r}" in broker.log_text()


def test_mq_named_subscriptions_with_identities_and_filters(
    served: tuple[BrokerProcess, int],
) -> None:
    broker, http_port = served
    client = PahoClient(broker.port, unique("adm-mq"), **APP,
                        version=MQTT311)  # fmt: skip
    queue = unique("ADM.Q")
    try:
        client.connect()
        pscr = command(
            client,
            {
                "Command": "RegSub",
                "Topic": ["adm/prices/#"],
                "QName": queue,
                "SubName": "price-watch",
                "SubIdentity": "alpha",
                "SubUserData": "for the dashboard",
                "RegOpt": ["AddName", "JoinShared", "NewPubsOnly"],
                "Filter": "price > 100 AND currency = 'EUR'",
            },
        )
        assert pscr["Completion"] == "ok", pscr
        listed = Api(http_port).get("/subscriptions", search="price-watch")
        assert listed["total"] == 1
        subscription = listed["subscriptions"][0]
        assert subscription["kind"] == "mq"
        assert subscription["name"] == "price-watch"
        assert subscription["queue"] == queue
        assert subscription["identities"] == [{"name": "alpha", "exclusive": False}]
        assert subscription["filter"] == "price > 100 AND currency = 'EUR'"
        assert subscription["user_data"] == "for the dashboard"
        assert "NewPubsOnly" in subscription["options"]
        assert subscription["owner"] == "app"
        assert subscription["created_at"].endswith("Z")
        of_queue = Api(http_port).get("/subscriptions", client_id=queue)
        assert [s["id"] for s in of_queue["subscriptions"]] == [subscription["id"]]
    finally:
        client.close()


def test_retained_messages_listed_read_and_deleted(served: tuple[BrokerProcess, int]) -> None:
    broker, http_port = served
    api = Api(http_port)
    base = unique("adm/retained")
    client = PahoClient(broker.port, **APP)
    try:
        client.connect()
        client.publish(f"{base}/a", "first", qos=1, retain=True)
        client.publish(f"{base}/b", b"\xff\x00binary", qos=1, retain=True)
        listed = api.get("/retained", topic=f"{base}/#")
        assert [m["topic"] for m in listed["retained"]] == [f"{base}/a", f"{base}/b"]
        binary = listed["retained"][1]
        assert base64.b64decode(binary["payload_base64"]) == b"\xff\x00binary"
        assert binary["size"] == 8 and binary["qos"] == 1
        one = api.get("/retained/" + urllib.parse.quote(f"{base}/a", safe=""))
        assert one["payload"] == "first" and one["published_at"].endswith("Z")
        status, _, _ = api.call("DELETE", "/retained/" + urllib.parse.quote(f"{base}/a"))
        assert status == 204
        status, body, _ = api.call("GET", "/retained/" + urllib.parse.quote(f"{base}/a"))
        assert status == 404 and "no retained message" in body["error"]
        assert [m["topic"] for m in api.get("/retained", topic=f"{base}/#")["retained"]] == [
            f"{base}/b"
        ]
        status, body, _ = api.call("GET", "/retained", topic="a/#/b")
        assert status == 400 and "not a topic filter" in body["error"]
        status, body, _ = api.call("GET", "/retained", sub_point="nowhere")
        assert status == 404
    finally:
        client.close()
    # The deletion is durable: a new subscriber, after a restart, gets only b.
    broker.stop()
    broker.start()
    late = PahoClient(broker.port, **APP)
    try:
        late.connect()
        late.subscribe(f"{base}/#", qos=1)
        assert [m.topic for m in late.wait_messages(1)] == [f"{base}/b"]
    finally:
        late.close()
    assert "admin 'root': deleted the retained message on" in broker.log_text()


def test_publish_and_what_it_refuses(served: tuple[BrokerProcess, int]) -> None:
    broker, http_port = served
    api = Api(http_port)
    topic = unique("adm/publish")
    subscriber = PahoClient(broker.port, **APP)
    try:
        subscriber.connect()
        subscriber.subscribe(topic, qos=2)
        status, body, _ = api.call(
            "POST", "/publish", {"topic": topic, "payload": "hello", "qos": 1}
        )
        assert (status, body) == (200, {"topic": topic, "qos": 1, "retain": False})
        raw = base64.b64encode(b"\x00\x01").decode()
        body = {"topic": topic, "payload_base64": raw, "qos": 2, "retain": True}
        assert api.call("POST", "/publish", body)[0] == 200
        got = subscriber.wait_messages(2)
        assert [(m.payload, m.qos) for m in got] == [(b"hello", 1), (b"\x00\x01", 2)]
        assert api.get("/retained/" + topic)["payload_base64"] == raw
    finally:
        subscriber.close()
    refused = [
        ({"payload": "x"}, "topic must be"),
        ({"topic": "a/+/b"}, "invalid topic name"),
        ({"topic": "$SYS/broker/x"}, "topics starting with $ are the broker's"),
        ({"topic": "t", "qos": 3}, "qos must be 0, 1 or 2"),
        ({"topic": "t", "payload": "a", "payload_base64": "YQ=="}, "not both"),
        ({"topic": "t", "payload_base64": "***"}, "not base64"),
        ({"topic": "t", "retain": "yes"}, "retain must be"),
        ({"topic": "t", "sub_point": "nowhere"}, "subscription point"),
        ({"topic": "t", "colour": "red"}, "unknown fields: colour"),
        ([1, 2], "JSON object"),
    ]
    for body, problem in refused:
        status, answer, _ = api.call("POST", "/publish", body)
        assert status == 400 and problem in answer["error"], (body, answer)
    assert f"admin 'root': published 5 bytes on {topic!r} (QoS 1)" in broker.log_text()


def test_journal_bounds_and_consumers(served: tuple[BrokerProcess, int]) -> None:
    broker, http_port = served
    api = Api(http_port)
    client = PahoClient(broker.port, **APP)
    try:
        client.connect()
        client.publish(unique("adm/journal"), "j", qos=1)
    finally:
        client.close()
    app_offsets = f"http://127.0.0.1:{http_port}/journal/v1/consumers/adm-query"
    request = urllib.request.Request(
        app_offsets, data=json.dumps({"committed_seq": 1}).encode(), method="PUT"
    )
    request.add_header("Authorization", "Basic " + base64.b64encode(b"app:app-pw").decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    journal = api.get("/journal")
    assert journal["first"] == 1 and journal["last"] >= 1
    assert [(c["name"], c["owner"], c["committed_seq"]) for c in journal["consumers"]] == [
        ("adm-query", "app", 1)
    ]


def test_the_openapi_document_is_valid_and_names_every_route(
    served: tuple[BrokerProcess, int],
) -> None:
    _, http_port = served
    with urllib.request.urlopen(
        f"http://127.0.0.1:{http_port}/api/v1/openapi.json", timeout=10
    ) as response:  # no credentials: it holds no data
        document = json.loads(response.read())
    validate(document)
    assert document == json.loads(OPENAPI.read_text("utf-8"))
    app = web.Application()
    AdminApi(None, None, lambda user: True).install(app)  # type: ignore[arg-type]
    served_routes = {
        (route.method.lower(), route.resource.canonical.removeprefix("/api/v1"))
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    documented = {
        (method, path) for path, operations in document["paths"].items() for method in operations
    }
    assert served_routes == documented
