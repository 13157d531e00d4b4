"""Interoperability with MQTT.js (the npm package ``mqtt``, 5.x) under Node, MQTT 3.1.1 and 5.0.

Each MQTT.js client is a ``node`` process running ``tests/interop/node/mqttjs_client.mjs``,
driven through `testsupport.node.MqttJsClient` (JSON lines both ways); the broker is a real
subprocess shared by the module. Without Node or the installed packages the tests fail,
naming what is missing (`require_mqttjs`).

What is checked at 3.1.1: the CONNACK as MQTT.js reports it; a subscription at each QoS and
publications at each QoS from another MQTT.js client, received with the publisher's payload
(binary, not UTF-8) at the lower of the two QoS; a retained message delivered on subscribe;
no delivery after an unsubscribe; an unreachable broker reported as an error.

At 5.0 (``protocolVersion: 5``), in both directions: the CONNACK's limits and an assigned
client id; message properties through the broker at each QoS, and 3.1.1 and 5.0 clients
mixed; topic aliases from a publisher and toward a subscriber; reason codes in SUBACK,
UNSUBACK and PUBACK, and the server's DISCONNECT (invalid payload format, session taken
over); the Session Expiry Interval; delayed wills and DISCONNECT 0x04; the client's Maximum
Packet Size and Receive Maximum; subscription options (No Local, Retain As Published, Retain
Handling) and subscription identifiers; message expiry of queued messages; enhanced
authentication with SCRAM-SHA-256 (the client checks the server's signature; a wrong
password gets 0x86).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testsupport.node import (
    EXIT_DEADLINE,
    Event,
    MqttJsClient,
    MqttJsError,
    buffer,
    from_buffers,
    payload,
    require_mqttjs,
)
from testsupport.process import BrokerProcess, free_port, unique, users_and_acl

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

MQTT311 = 4
MQTT5 = 5
BINARY = bytes(range(256)) + b"\xff\xfe not UTF-8 \x00"
MqttJsMaker = Callable[..., MqttJsClient]


@pytest.fixture
def mqttjs() -> Iterator[MqttJsMaker]:
    """Start MQTT.js script processes (not yet connected); all are stopped at the end, and
    the test fails if one of them did not exit with status 0."""
    require_mqttjs()
    started: list[MqttJsClient] = []

    def make(name: str = "mqttjs") -> MqttJsClient:
        client = MqttJsClient(name=name)
        started.append(client)
        return client.start()

    yield make
    problems = []
    for client in started:
        try:
            client.finish()
        except MqttJsError as error:
            problems.append(str(error))
    assert not problems, "\n\n".join(problems)


def connected(make: MqttJsMaker, port: int, name: str, **options: Any) -> MqttJsClient:
    client = make(name)
    client.connect(port, protocolVersion=MQTT311, clientId=unique(name), clean=True, **options)
    return client


def test_a_dead_script_fails_expect_none_and_its_exit_status_fails_finish() -> None:
    """Silence from a script that has died proves nothing: `expect_none` fails, and so does
    `finish` (the fixture's teardown), on the exit status of a killed script."""
    require_mqttjs()
    client = MqttJsClient(name="doomed").start()
    try:
        assert client._proc is not None
        client._proc.kill()
        client._proc.wait(EXIT_DEADLINE)
        with pytest.raises(MqttJsError, match=r"the script (ended|exited)"):
            client.expect_none("message", within=0.3)
        with pytest.raises(MqttJsError, match="exit status -9"):
            client.finish()
    finally:
        client.close()


def test_a_script_asked_to_exit_finishes_with_status_0() -> None:
    require_mqttjs()
    client = MqttJsClient(name="clean").start()
    try:
        client.expect_none("message", within=0.1)
        client.finish()
        assert not client.running
    finally:
        client.close()


def test_connect_reports_the_connack(broker: BrokerProcess, mqttjs: MqttJsMaker) -> None:
    client = mqttjs()
    assert client.ready is not None and client.ready["mqttjs"].startswith("5.")
    event = client.connect(broker.port, protocolVersion=MQTT311, clientId=unique("c"))
    connack = event["packet"]
    assert connack["cmd"] == "connack"
    assert connack["returnCode"] == 0
    assert connack["sessionPresent"] is False
    assert "properties" not in connack  # a 3.1.1 CONNACK has none
    client.end()
    assert client.wait_for("close")


@pytest.mark.parametrize("sub_qos", [0, 1, 2])
def test_publish_every_qos_round_trip(
    broker: BrokerProcess, mqttjs: MqttJsMaker, sub_qos: int
) -> None:
    topic = f"mqttjs/{unique('qos')}/data"
    subscriber = connected(mqttjs, broker.port, "sub")
    publisher = connected(mqttjs, broker.port, "pub")

    suback = subscriber.subscribe(topic, qos=sub_qos)
    assert suback["granted"] == [{"topic": topic, "qos": sub_qos}]
    assert suback["packet"]["granted"] == [sub_qos]

    for qos in (0, 1, 2):
        result = publisher.publish(topic, BINARY + bytes([qos]), qos=qos)
        expected_acks = {0: [], 1: ["puback"], 2: ["pubrec", "pubcomp"]}[qos]
        assert [ack["cmd"] for ack in result["acks"]] == expected_acks

    received = subscriber.messages(3)
    assert [m["topic"] for m in received] == [topic] * 3
    assert [payload(m) for m in received] == [BINARY + bytes([qos]) for qos in (0, 1, 2)]
    assert [m["qos"] for m in received] == [min(qos, sub_qos) for qos in (0, 1, 2)]
    assert all(m["retain"] is False and m["dup"] is False for m in received)
    assert all(m["properties"] is None for m in received)  # 3.1.1: none
    subscriber.expect_none("message", within=0.3)


def test_a_client_receives_its_own_publications(broker: BrokerProcess, mqttjs: MqttJsMaker) -> None:
    topic = f"mqttjs/{unique('self')}"
    client = connected(mqttjs, broker.port, "self")
    client.subscribe(topic, qos=1)
    for qos in (0, 1, 2):
        client.publish(topic, b"own %d" % qos, qos=qos)
    received = client.messages(3)
    assert [(payload(m), m["qos"]) for m in received] == [
        (b"own 0", 0),
        (b"own 1", 1),
        (b"own 2", 1),
    ]


def test_a_retained_message_is_delivered_on_subscribe(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    topic = f"mqttjs/{unique('retained')}/state"
    publisher = connected(mqttjs, broker.port, "pub")
    publisher.publish(topic, b"on", qos=1, retain=True)

    subscriber = connected(mqttjs, broker.port, "sub")
    subscriber.subscribe(f"{topic.rsplit('/', 1)[0]}/+", qos=1)
    [message] = subscriber.messages(1)
    assert (message["topic"], payload(message), message["qos"]) == (topic, b"on", 1)
    assert message["retain"] is True

    # A live publication on a subscribed topic comes without the retain flag (MQTT-3.3.1-9).
    publisher.publish(topic, b"off", qos=1, retain=True)
    [live] = subscriber.messages(1)
    assert (payload(live), live["retain"]) == (b"off", False)

    publisher.publish(topic, b"", qos=1, retain=True)  # clear it
    late = connected(mqttjs, broker.port, "late")
    late.subscribe(topic, qos=1)
    late.expect_none("message", within=0.5)


def test_no_delivery_after_unsubscribe(broker: BrokerProcess, mqttjs: MqttJsMaker) -> None:
    base = f"mqttjs/{unique('unsub')}"
    subscriber = connected(mqttjs, broker.port, "sub")
    subscriber.subscribe({f"{base}/gone": {"qos": 1}, f"{base}/kept": {"qos": 1}})
    unsuback = subscriber.unsubscribe(f"{base}/gone")
    assert unsuback["packet"]["cmd"] == "unsuback"

    publisher = connected(mqttjs, broker.port, "pub")
    publisher.publish(f"{base}/gone", b"dropped", qos=1)
    publisher.publish(f"{base}/kept", b"marker", qos=1)
    [message] = subscriber.messages(1)
    assert (message["topic"], payload(message)) == (f"{base}/kept", b"marker")
    subscriber.expect_none("message", within=0.3)


def test_an_unreachable_broker_is_an_error(mqttjs: MqttJsMaker) -> None:
    client = mqttjs()
    client.send("connect", url=f"mqtt://127.0.0.1:{free_port()}", options={})
    error = client.wait_for("error")["error"]
    assert error["code"] == "ECONNREFUSED", error
    assert client.wait_for("close")


# -- MQTT 5.0 ---------------------------------------------------------------------------------


def connected5(
    make: MqttJsMaker, port: int, name: str, *, trace: bool = False, **options: Any
) -> MqttJsClient:
    """An MQTT.js client connected at MQTT 5.0 (a unique client id and a clean start unless
    `options` say otherwise)."""
    client = make(name)
    options.setdefault("clientId", unique(name))
    options.setdefault("clean", True)
    client.connect(port, protocolVersion=MQTT5, trace=trace, **options)
    return client


def publish_unchecked(client: MqttJsClient, topic: str, data: bytes, **options: Any) -> Event:
    """Publish and return the result even when MQTT.js reports a failure (an error reason)."""
    return client.request(
        "publish",
        check=False,
        topic=topic,
        payload_b64=base64.b64encode(data).decode("ascii"),
        options=options,
    )


def is_publish(event: Event) -> bool:
    return bool(event["packet"]["cmd"] == "publish")


def test_a_v5_connect_gets_connack_0_with_the_server_limits(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A 5.0 client learns the server's limits from CONNACK; MQTT.js obeys them, so they must
    be there, under MQTT.js's names, and match the broker's defaults."""
    client = mqttjs()
    connack = client.connect(broker.port, protocolVersion=MQTT5, clientId=unique("v5"))["packet"]
    assert connack["cmd"] == "connack"
    assert connack["reasonCode"] == 0
    assert connack["sessionPresent"] is False
    assert connack["properties"] == {
        "receiveMaximum": 1024,
        "topicAliasMaximum": 64,
        "maximumPacketSize": 1048576,
    }
    client.end()
    assert client.wait_for("close")


def test_an_empty_client_id_is_assigned_one_in_connack(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """At 5.0 a client may leave its id to the server, which must then say which it chose
    (Assigned Client Identifier); two such clients get different ones."""
    assigned = []
    for _ in range(2):
        client = mqttjs()
        connack = client.connect(broker.port, protocolVersion=MQTT5, clientId="")["packet"]
        assert connack["reasonCode"] == 0
        ident = connack["properties"]["assignedClientIdentifier"]
        assert isinstance(ident, str) and ident
        assigned.append(ident)
    assert assigned[0] != assigned[1]


MESSAGE_PROPERTIES: dict[str, Any] = {
    "payloadFormatIndicator": True,
    "contentType": "text/plain; charset=utf-8",
    "responseTopic": "mqttjs/replies/here",
    "correlationData": buffer(BINARY),
    # A repeated name travels as repeated User Properties, decoded back into a list in order.
    "userProperties": {"origin": "mqttjs", "tag": ["first", "second", "first"], "z": "last"},
}


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_v5_message_properties_arrive_unchanged(
    broker: BrokerProcess, mqttjs: MqttJsMaker, qos: int
) -> None:
    """A 5.0 subscriber gets every application property a 5.0 publisher set, at each QoS
    (they go through the store and the per-subscriber encoding); the expiry only shrinks."""
    topic = f"mqttjs5/{unique('props')}/data"
    subscriber = connected5(mqttjs, broker.port, "sub")
    publisher = connected5(mqttjs, broker.port, "pub")
    subscriber.subscribe(topic, qos=2)
    body = "héllo ✓ wörld".encode()
    publisher.publish(
        topic, body, qos=qos, properties={**MESSAGE_PROPERTIES, "messageExpiryInterval": 300}
    )

    [message] = subscriber.messages(1)
    assert (message["topic"], payload(message), message["qos"]) == (topic, body, qos)
    properties = message["properties"]
    expiry = properties.pop("messageExpiryInterval")
    assert 0 < expiry <= 300
    assert properties == MESSAGE_PROPERTIES
    assert from_buffers(properties["correlationData"]) == BINARY
    assert list(properties["userProperties"]) == ["origin", "tag", "z"]


def test_a_311_publisher_reaches_a_v5_subscriber(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """Protocol levels mix on one broker: a 3.1.1 publication reaches a 5.0 subscriber, with
    its payload and QoS and no properties it never had."""
    topic = f"mqttjs5/{unique('mixed')}"
    subscriber = connected5(mqttjs, broker.port, "sub5")
    publisher = connected(mqttjs, broker.port, "pub311")
    subscriber.subscribe(topic, qos=2)
    for qos in (0, 1, 2):
        publisher.publish(topic, BINARY + bytes([qos]), qos=qos)
    received = subscriber.messages(3)
    assert [(m["topic"], payload(m), m["qos"]) for m in received] == [
        (topic, BINARY + bytes([qos]), qos) for qos in (0, 1, 2)
    ]
    assert all(m["properties"] is None for m in received), received


def test_a_v5_publisher_reaches_a_311_subscriber(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A 5.0 publication reaches a 3.1.1 subscriber as a plain 3.1.1 PUBLISH: the properties
    are left out, the payload and QoS are kept."""
    topic = f"mqttjs5/{unique('mixed')}"
    subscriber = connected(mqttjs, broker.port, "sub311")
    publisher = connected5(mqttjs, broker.port, "pub5")
    subscriber.subscribe(topic, qos=2)
    # Not the payload format indicator: BINARY is no UTF-8, and the broker would refuse it.
    properties = {k: v for k, v in MESSAGE_PROPERTIES.items() if k != "payloadFormatIndicator"}
    for qos in (0, 1, 2):
        publisher.publish(topic, BINARY + bytes([qos]), qos=qos, properties=properties)
    received = subscriber.messages(3)
    assert [(m["topic"], payload(m), m["qos"]) for m in received] == [
        (topic, BINARY + bytes([qos]), qos) for qos in (0, 1, 2)
    ]
    assert all(m["properties"] is None for m in received), received


def test_topic_aliases_from_the_publisher_are_resolved(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A publisher may name a topic once with an alias and then send the alias alone (an
    empty topic); the broker must deliver each message on the topic the alias stands for."""
    base = f"mqttjs5/{unique('alias')}"
    subscriber = connected5(mqttjs, broker.port, "sub")
    subscriber.subscribe(f"{base}/#", qos=2)
    publisher = connected5(mqttjs, broker.port, "pub", trace=True)

    publisher.publish(f"{base}/one", b"set 1", qos=0, properties={"topicAlias": 1})
    publisher.publish(f"{base}/two", b"set 2", qos=1, properties={"topicAlias": 2})
    publisher.publish("", b"use 2", qos=2, properties={"topicAlias": 2})
    publisher.publish("", b"use 1", qos=1, properties={"topicAlias": 1})
    publisher.publish("", b"use 1 again", qos=0, properties={"topicAlias": 1})

    sent = [
        (e["packet"]["topic"], e["packet"]["properties"]["topicAlias"])
        for e in publisher.history
        if e.get("event") == "packetsend" and is_publish(e)
    ]
    assert sent == [(f"{base}/one", 1), (f"{base}/two", 2), ("", 2), ("", 1), ("", 1)]
    received = subscriber.messages(5)
    # Order holds per topic only: MQTT.js reports a QoS 2 message at PUBREL, one round trip
    # after the PUBLISH, so "use 1" (QoS 1, another topic) may be reported before "use 2".
    by_topic: dict[str, list[bytes]] = {}
    for m in received:
        by_topic.setdefault(m["topic"], []).append(payload(m))
    assert by_topic == {
        f"{base}/one": [b"set 1", b"use 1", b"use 1 again"],
        f"{base}/two": [b"set 2", b"use 2"],
    }
    # The alias is the publisher's connection's only: it does not travel to the subscriber.
    assert all("topicAlias" not in (m["properties"] or {}) for m in received)


def test_topic_aliases_toward_a_subscriber_that_allows_them(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A subscriber that advertises a Topic Alias Maximum gets the topic once with an alias
    and then the alias alone; MQTT.js resolves it, so every message has its topic."""
    topic = f"mqttjs5/{unique('alias')}/out"
    subscriber = connected5(
        mqttjs, broker.port, "sub", trace=True, properties={"topicAliasMaximum": 4}
    )
    # QoS 1 at most: MQTT.js 5.16 reports a QoS 2 message at PUBREL from the PUBLISH it
    # stored, whose topic it never filled in from the alias (the message's topic is "").
    subscriber.subscribe(topic, qos=1)
    publisher = connected5(mqttjs, broker.port, "pub")
    for qos in (0, 1, 2, 0):
        publisher.publish(topic, b"n%d" % qos, qos=qos)

    received = subscriber.messages(4)
    assert [(m["topic"], payload(m)) for m in received] == [
        (topic, b"n0"),
        (topic, b"n1"),
        (topic, b"n2"),
        (topic, b"n0"),
    ]
    wire = [
        e["packet"]
        for e in subscriber.history
        if e.get("event") == "packetreceive" and is_publish(e)
    ]
    assert len(wire) == 4
    alias = wire[0]["properties"]["topicAlias"]
    assert wire[0]["topic"] == topic and 1 <= alias <= 4
    assert [(p["topic"], p["properties"]["topicAlias"]) for p in wire[1:]] == [("", alias)] * 3
    subscriber.expect_none("error", "disconnect", within=0.2)


def test_a_shared_subscription_gives_each_message_to_one_member(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """Two members of `$share/g/...` share the messages: each arrives once, at one of them,
    taking turns; a plain subscriber to the same topic still gets them all."""
    topic = f"mqttjs5/{unique('shared')}"
    members = [connected5(mqttjs, broker.port, f"member{i}") for i in range(2)]
    for member in members:
        member.subscribe({f"$share/g/{topic}": {"qos": 1}})
    plain = connected5(mqttjs, broker.port, "plain")
    plain.subscribe({topic: {"qos": 1}})
    publisher = connected5(mqttjs, broker.port, "pub")
    for index in range(10):
        publisher.publish(topic, f"m{index}".encode(), qos=1)
    assert sorted(payload(m) for m in plain.messages(10)) == sorted(
        f"m{index}".encode() for index in range(10)
    )
    got = [[payload(m) for m in member.messages(5)] for member in members]
    assert sorted(got[0] + got[1]) == sorted(f"m{index}".encode() for index in range(10))
    for member in members:
        member.expect_none("message", within=0.3)


def test_unsubscribing_a_filter_never_subscribed_gets_0x11(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """UNSUBACK has a reason per filter at 5.0: 0 for a subscription removed, 0x11 (no
    subscription existed) for one there was not."""
    client = connected5(mqttjs, broker.port, "unsub")
    base = f"mqttjs5/{unique('unsub')}"
    client.subscribe(f"{base}/yes", qos=1)
    unsuback = client.unsubscribe([f"{base}/yes", f"{base}/never"])["packet"]
    assert unsuback["cmd"] == "unsuback"
    assert unsuback["granted"] == [0, 0x11]  # mqtt-packet's name for UNSUBACK's reason codes


def test_an_invalid_utf8_payload_at_qos1_gets_puback_0x99(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A payload that says it is UTF-8 and is not is refused with PUBACK 0x99 at QoS 1: the
    message is not delivered, and the connection stays up for the next ones."""
    topic = f"mqttjs5/{unique('utf8')}"
    client = connected5(mqttjs, broker.port, "utf8")
    client.subscribe(topic, qos=1)
    result = publish_unchecked(
        client, topic, b"\xff\xfe not UTF-8", qos=1, properties={"payloadFormatIndicator": True}
    )
    assert not result["ok"]
    assert [(a["cmd"], a["reasonCode"]) for a in result["acks"]] == [("puback", 0x99)]
    assert result["error"]["code"] == 0x99

    client.publish(topic, "fine ✓".encode(), qos=1, properties={"payloadFormatIndicator": True})
    [message] = client.messages(1)
    assert payload(message) == "fine ✓".encode()
    client.expect_none("disconnect", "close", within=0.2)


def test_an_invalid_utf8_payload_at_qos0_gets_disconnect_0x99(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """At QoS 0 there is no acknowledgement to refuse with, so the server ends the connection
    with DISCONNECT 0x99 (payload format invalid) and delivers nothing."""
    topic = f"mqttjs5/{unique('utf8')}"
    watcher = connected5(mqttjs, broker.port, "watch")
    watcher.subscribe(topic, qos=1)
    client = connected5(mqttjs, broker.port, "utf8")
    client.publish(topic, b"\xc3\x28 bad", qos=0, properties={"payloadFormatIndicator": True})
    disconnect = client.wait_for("disconnect")["packet"]
    assert (disconnect["cmd"], disconnect["reasonCode"]) == ("disconnect", 0x99)
    assert client.wait_for("close")
    watcher.expect_none("message", within=0.3)


def test_a_taken_over_client_gets_disconnect_0x8e(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """When a second connection takes a client id, the first is told why before it is closed:
    DISCONNECT 0x8E (session taken over)."""
    client_id = unique("twin")
    first = connected5(mqttjs, broker.port, "first", clientId=client_id)
    second = connected5(mqttjs, broker.port, "second", clientId=client_id)
    disconnect = first.wait_for("disconnect")["packet"]
    assert (disconnect["cmd"], disconnect["reasonCode"]) == ("disconnect", 0x8E)
    assert first.wait_for("close")
    second.expect_none("disconnect", "close", within=0.3)


def test_a_session_with_an_expiry_interval_resumes_with_its_queued_message(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """At 5.0 the Session Expiry Interval makes a session outlive its connection: it comes
    back present, with its subscription and the QoS 1 message published meanwhile."""
    client_id, topic = unique("sess"), f"mqttjs5/{unique('sess')}"
    options: dict[str, Any] = {
        "protocolVersion": MQTT5,
        "clientId": client_id,
        "clean": False,
        "properties": {"sessionExpiryInterval": 60},
    }
    client = mqttjs("sess")
    assert client.connect(broker.port, **options)["packet"]["sessionPresent"] is False
    client.subscribe(topic, qos=1)
    client.end()
    assert client.wait_for("close")

    publisher = connected5(mqttjs, broker.port, "pub")
    publisher.publish(topic, b"while away", qos=1)

    assert client.connect(broker.port, **options)["packet"]["sessionPresent"] is True
    [message] = client.messages(1)
    assert (message["topic"], payload(message), message["qos"]) == (topic, b"while away", 1)


def test_a_session_without_an_expiry_interval_ends_with_its_connection(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A Session Expiry Interval of 0 (the default) ends the session with the connection, even
    without a clean start: the next connection finds no session and no subscription."""
    client_id, topic = unique("sess0"), f"mqttjs5/{unique('sess0')}"
    options: dict[str, Any] = {"protocolVersion": MQTT5, "clientId": client_id, "clean": False}
    client = mqttjs("sess0")
    client.connect(broker.port, **options)
    client.subscribe(topic, qos=1)
    client.end()
    assert client.wait_for("close")

    publisher = connected5(mqttjs, broker.port, "pub")
    publisher.publish(topic, b"nobody", qos=1)
    assert client.connect(broker.port, **options)["packet"]["sessionPresent"] is False
    publisher.publish(topic, b"still nobody", qos=1)
    client.expect_none("message", within=0.3)


def test_a_session_expires_after_its_interval(broker: BrokerProcess, mqttjs: MqttJsMaker) -> None:
    """A session is kept for its Session Expiry Interval after the connection and no longer:
    back within 2 s it is present, after 3.5 s away it is gone (housekeeping ends it)."""
    client_id, topic = unique("sess2"), f"mqttjs5/{unique('sess2')}"
    options: dict[str, Any] = {
        "protocolVersion": MQTT5,
        "clientId": client_id,
        "clean": False,
        "properties": {"sessionExpiryInterval": 2},
    }
    client = mqttjs("sess2")
    client.connect(broker.port, **options)
    client.subscribe(topic, qos=1)
    client.end()
    assert client.wait_for("close")
    time.sleep(0.5)
    assert client.connect(broker.port, **options)["packet"]["sessionPresent"] is True
    client.end()
    assert client.wait_for("close")

    time.sleep(3.5)
    assert client.connect(broker.port, **options)["packet"]["sessionPresent"] is False


def will_options(topic: str, delay: int | None = None) -> dict[str, Any]:
    will: dict[str, Any] = {"topic": topic, "payload": buffer(b"gone"), "qos": 1}
    if delay is not None:
        will["properties"] = {"willDelayInterval": delay}
    return will


def test_a_delayed_will_is_published_after_its_delay(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A Will Delay Interval holds the will back after a connection drops (so a quick
    reconnection can cancel it): not at once, but after about 2 s."""
    topic = f"mqttjs5/{unique('will')}"
    watcher = connected5(mqttjs, broker.port, "watch")
    watcher.subscribe(topic, qos=1)
    client = connected5(
        mqttjs,
        broker.port,
        "will",
        will=will_options(topic, delay=2),
        properties={"sessionExpiryInterval": 60},
    )
    client.end(force=True)  # the socket closes without DISCONNECT
    watcher.expect_none("message", within=1.0)
    [message] = watcher.messages(1, timeout=5.0)
    assert (message["topic"], payload(message), message["qos"]) == (topic, b"gone", 1)


def test_reconnecting_within_the_will_delay_cancels_the_will(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A client back on its session before the Will Delay Interval is over was never really
    gone: its will is not published."""
    topic, client_id = f"mqttjs5/{unique('will')}", unique("will")
    watcher = connected5(mqttjs, broker.port, "watch")
    watcher.subscribe(topic, qos=1)
    session: dict[str, Any] = {"clientId": client_id, "properties": {"sessionExpiryInterval": 60}}
    client = connected5(mqttjs, broker.port, "will", will=will_options(topic, delay=2), **session)
    client.end(force=True)
    assert client.wait_for("close")
    time.sleep(0.5)
    connack = client.connect(broker.port, protocolVersion=MQTT5, clean=False, **session)
    assert connack["packet"]["sessionPresent"] is True
    watcher.expect_none("message", within=3.0)


def test_a_disconnect_with_0x04_publishes_the_will(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """DISCONNECT 0 drops the will, as in 3.1.1; at 5.0, DISCONNECT 0x04 (disconnect with
    will message) asks the server to publish it."""
    topic = f"mqttjs5/{unique('will')}"
    watcher = connected5(mqttjs, broker.port, "watch")
    watcher.subscribe(topic, qos=1)

    polite = connected5(mqttjs, broker.port, "polite", will=will_options(topic))
    polite.end()
    assert polite.wait_for("close")
    watcher.expect_none("message", within=0.5)

    leaving = connected5(mqttjs, broker.port, "leaving", will=will_options(topic))
    leaving.end(reasonCode=4)
    [message] = watcher.messages(1)
    assert (message["topic"], payload(message), message["qos"]) == (topic, b"gone", 1)


@pytest.mark.parametrize("sub_qos", [0, 1])
def test_a_message_larger_than_the_clients_maximum_packet_size_is_not_sent(
    broker: BrokerProcess, mqttjs: MqttJsMaker, sub_qos: int
) -> None:
    """A client's Maximum Packet Size binds the server: a larger message is dropped for that
    client (MQTT.js would close on it), and the following smaller one still arrives."""
    topic = f"mqttjs5/{unique('size')}"
    subscriber = connected5(mqttjs, broker.port, "small", properties={"maximumPacketSize": 200})
    subscriber.subscribe(topic, qos=sub_qos)
    publisher = connected5(mqttjs, broker.port, "pub")
    publisher.publish(topic, b"x" * 1000, qos=1)
    publisher.publish(topic, b"fits", qos=1)
    [message] = subscriber.messages(1)
    assert payload(message) == b"fits"
    subscriber.expect_none("message", "error", "close", within=0.3)


def test_a_receive_maximum_of_1_still_delivers_everything_in_order(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """A client's Receive Maximum of 1 lets the server have one QoS 1 PUBLISH unacknowledged
    at a time; the others must wait in the session's queue, not be lost or reordered."""
    topic = f"mqttjs5/{unique('recvmax')}"
    subscriber = connected5(mqttjs, broker.port, "slow", properties={"receiveMaximum": 1})
    subscriber.subscribe(topic, qos=1)
    publisher = connected5(mqttjs, broker.port, "pub")
    for n in range(20):
        publisher.publish(topic, b"%d" % n, qos=1)
    received = subscriber.messages(20)
    assert [payload(m) for m in received] == [b"%d" % n for n in range(20)]
    assert all(m["qos"] == 1 for m in received)
    subscriber.expect_none("message", "error", "disconnect", within=0.3)


@pytest.fixture(scope="module")
def broker_with_users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose [[users]] can log in with SCRAM-SHA-256."""
    workdir = tmp_path_factory.mktemp("users")
    config = workdir / "users.toml"
    config.write_text(users_and_acl({"alice": "wonderland"}, [("alice", "all", "alice/#", True)]))
    process = BrokerProcess(workdir / "broker", config=config)
    process.start()
    yield process
    process.finalize()


def test_mqttjs_logs_in_with_scram_sha_256_and_verifies_the_server(
    broker_with_users: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """Enhanced authentication: MQTT.js sends client-first in CONNECT, answers the broker's
    AUTH 0x18 through `handleAuth`, and checks the server's signature in CONNACK; the
    connection is then Alice's, with her ACL."""
    client = mqttjs("scram")
    login = {"user": "alice", "password": "wonderland"}
    connack = client.connect(
        broker_with_users.port, protocolVersion=MQTT5, clientId=unique("scram"), scram=login
    )["packet"]
    assert connack["reasonCode"] == 0
    assert connack["properties"]["authenticationMethod"] == "SCRAM-SHA-256"
    assert client.wait_for("scram")["verified"] is True
    topic = f"alice/{unique('t')}"
    assert client.subscribe(topic, qos=1)["packet"]["granted"] == [1]
    client.send("subscribe", topic="bob/x", options={"qos": 1})
    refused = client.wait_for("result")
    assert refused["ok"] is False and refused["packet"]["granted"] == [0x87]
    client.publish(topic, b"hi", qos=1)
    [message] = client.messages(1)
    assert payload(message) == b"hi"


def test_mqttjs_with_a_wrong_scram_password_is_refused_with_0x86(
    broker_with_users: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    client = mqttjs("scram-bad")
    login = {"user": "alice", "password": "looking-glass"}
    client.send(
        "connect",
        url=f"mqtt://127.0.0.1:{broker_with_users.port}",
        options={"protocolVersion": MQTT5, "clientId": unique("scram"), "scram": login},
    )
    error = client.wait_for("error")["error"]
    assert error["code"] == 0x86
    client.expect_none("connect", within=0.3)


def test_mq_commands_use_response_topic_and_correlation_data(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """The MQ model at 5.0 (docs/mq.md, "MQTT 5.0"): a RegSub with CorrelAsId whose reply
    topic and CorrelId are the PUBLISH's Response Topic and Correlation Data; the reply comes
    back there with the Correlation Data, and the subscription's deliveries carry the
    CorrelId as Correlation Data in place of the publisher's own."""
    client_id = unique("mq")
    client = connected5(mqttjs, broker.port, "mq", clientId=client_id)
    replies = f"mqttjs5/{unique('replies')}"
    topic = f"mqttjs5/{unique('mq')}"
    client.subscribe(replies, qos=1)
    correl = b"\x00mq-correl\xff"
    command = (
        f"<psc><Command>RegSub</Command><Topic>{topic}</Topic>"
        f"<QName>{client_id}</QName><RegOpt>CorrelAsId</RegOpt></psc>"
    ).encode()
    client.publish(
        "SYSTEM.BROKER.CONTROL.QUEUE",
        command,
        qos=1,
        properties={"responseTopic": replies, "correlationData": buffer(correl)},
    )
    [reply] = client.messages(1)
    assert reply["topic"] == replies
    assert b"<Completion>ok</Completion>" in payload(reply)
    props = from_buffers(reply["properties"])
    assert props["correlationData"] == correl
    assert props["contentType"] == "application/xml"
    publisher = connected5(mqttjs, broker.port, "pub")
    publisher.publish(
        topic,
        b"news",
        qos=1,
        properties={"correlationData": buffer(b"own"), "userProperties": {"a": "b"}},
    )
    [delivered] = client.messages(1)
    assert payload(delivered) == b"news"
    props = from_buffers(delivered["properties"])
    assert props["correlationData"] == correl
    assert props["userProperties"] == {"a": "b"}


def test_subscription_options_no_local_retain_as_published_and_retain_handling(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """No Local (`nl`), Retain As Published (`rap`) and Retain Handling 2 (`rh`), as MQTT.js
    sends them in SUBSCRIBE."""
    topic = f"mqttjs5/{unique('options')}"
    retained = connected5(mqttjs, broker.port, "retainer")
    retained.publish(topic + "/kept", b"kept", qos=1, retain=True)
    client = connected5(mqttjs, broker.port, "self")
    client.subscribe({topic + "/#": {"qos": 1, "nl": True, "rap": True, "rh": 2}})
    client.expect_none("message", within=0.3)  # rh 2: no retained message on subscribing
    client.publish(topic + "/own", b"own", qos=1)  # nl: not sent back to its publisher
    other = connected5(mqttjs, broker.port, "other")
    other.publish(topic + "/live", b"live", qos=1, retain=True)
    [message] = client.messages(1)
    assert (message["topic"], payload(message)) == (topic + "/live", b"live")
    assert message["retain"] is True  # rap: RETAIN as published on a live message
    client.expect_none("message", within=0.3)


def test_subscription_identifiers_on_deliveries(broker: BrokerProcess, mqttjs: MqttJsMaker) -> None:
    """Each delivery carries the identifiers of the client's matching subscriptions."""
    topic = f"mqttjs5/{unique('subid')}"
    client = connected5(mqttjs, broker.port, "subid")
    client.subscribe({topic + "/#": {"qos": 1}}, properties={"subscriptionIdentifier": 7})
    client.subscribe({topic + "/a": {"qos": 1}}, properties={"subscriptionIdentifier": 9})
    publisher = connected5(mqttjs, broker.port, "pub")
    publisher.publish(topic + "/a", b"both", qos=1)
    publisher.publish(topic + "/b", b"one", qos=1)
    first, second = client.messages(2)
    identifiers = first["properties"]["subscriptionIdentifier"]
    assert sorted(identifiers if isinstance(identifiers, list) else [identifiers]) == [7, 9]
    assert second["properties"]["subscriptionIdentifier"] in (7, [7])


def test_an_expired_message_is_not_delivered_to_a_returning_session(
    broker: BrokerProcess, mqttjs: MqttJsMaker
) -> None:
    """Message Expiry Interval from MQTT.js: queued for an absent session, dropped when its
    time is up; the other one arrives with what is left of its interval."""
    topic = f"mqttjs5/{unique('expiry')}"
    client_id = unique("away")
    session = {"sessionExpiryInterval": 300}
    away = connected5(mqttjs, broker.port, "away", clientId=client_id, properties=session)
    away.subscribe({topic: {"qos": 1}})
    away.end()
    publisher = connected5(mqttjs, broker.port, "pub")
    publisher.publish(topic, b"short", qos=1, properties={"messageExpiryInterval": 1})
    publisher.publish(topic, b"long", qos=1, properties={"messageExpiryInterval": 100})
    time.sleep(2.0)
    back = connected5(
        mqttjs, broker.port, "back", clientId=client_id, clean=False, properties=session
    )
    [message] = back.messages(1)
    assert payload(message) == b"long"
    assert 95 <= message["properties"]["messageExpiryInterval"] <= 99
    back.expect_none("message", within=0.5)
