"""MQTT 5.0 against a running broker: raw sockets for each reason code the broker sends and
each protocol error it detects, and paho-mqtt (`MQTTv5`) for the features end to end.

The raw tests build packets with telemq's own 5.0 codec (golden-tested on its own in
tests/protocol/test_codec5.py) and read the broker's answers with it; MQTT.js covers the
same features from Node in test_40_mqttjs.py; test_42_enhanced_auth.py covers AUTH.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions

from telemq.client import MqttClient, MqttError
from telemq.protocol import (
    ConnAck,
    Connect,
    Disconnect,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
    encode,
)
from testsupport.process import users_and_acl
from testsupport.raw5 import V5, Raw5, Raw5Factory

from .helpers import (
    BrokerProcess,
    PahoClient,
    RawClient,
    Received,
    unique,
    wait_until,
    write_config,
)

BrokerFactory = Callable[..., BrokerProcess]
PahoFactory = Callable[..., PahoClient]


# ---------------------------------------------------------------------------------------------
# Raw MQTT 5.0 over a socket (testsupport.raw5; the `raw5` fixture comes from conftest.py)


def reason_string(packet: Disconnect | ConnAck) -> str:
    assert packet.properties is not None and packet.properties.reason_string is not None
    return packet.properties.reason_string


def test_connack_states_the_default_limits(broker: BrokerProcess, raw5: Raw5Factory) -> None:
    ack = raw5(broker.port).connect(unique("v5"))
    assert ack.return_code == 0 and not ack.session_present
    props = ack.properties
    assert props is not None
    assert props.receive_maximum == 1024
    assert props.topic_alias_maximum == 64
    assert props.maximum_packet_size == 1024 * 1024
    # Defaults that need no property: QoS 2, retain, wildcards, subscription identifiers
    # and shared subscriptions available.
    assert props.subscription_identifier_available is None
    assert props.shared_subscription_available is None
    assert props.maximum_qos is None and props.retain_available is None
    assert props.wildcard_subscription_available is None
    assert props.assigned_client_identifier is None


def test_an_empty_client_id_is_assigned_one(broker: BrokerProcess, raw5: Raw5Factory) -> None:
    """5.0 allows an empty client id even without Clean Start: the broker names it."""
    ack = raw5(broker.port).connect("", clean=False)
    assert ack.return_code == 0
    assert ack.properties is not None
    assigned = ack.properties.assigned_client_identifier
    assert assigned and assigned.startswith("telemq-")


@pytest.fixture
def limited(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerProcess:
    """A broker whose [mqtt5] section lowers every limit."""
    config = write_config(
        tmp_path / "limited.toml",
        "[limits]\nmax_packet_size = 2048\nmax_topic_length = 64\n"
        "[mqtt5]\nreceive_maximum = 2\nmaximum_qos = 1\nretain_available = false\n"
        "topic_alias_maximum = 3\nwildcard_subscription_available = false\n"
        "subscription_identifier_available = false\nshared_subscription_available = false\n"
        "max_session_expiry_interval = 30\nserver_keep_alive = 5\n",
    )
    return broker_factory(config=config)


def test_connack_states_configured_limits(limited: BrokerProcess, raw5: Raw5Factory) -> None:
    ack = raw5(limited.port).connect(
        unique("v5"), keepalive=60, properties=Properties(session_expiry_interval=3600)
    )
    props = ack.properties
    assert props is not None
    assert props.receive_maximum == 2
    assert props.maximum_qos == 1
    assert props.retain_available == 0
    assert props.maximum_packet_size == 2048
    assert props.topic_alias_maximum == 3
    assert props.wildcard_subscription_available == 0
    assert props.subscription_identifier_available == 0
    assert props.shared_subscription_available == 0
    assert props.server_keep_alive == 5  # the client asked for 60
    assert props.session_expiry_interval == 30  # the client asked for 3600


@pytest.mark.parametrize(
    ("publish", "code"),
    [
        (Publish("a/b", b"x", qos=2, packet_id=1), 0x9B),  # QoS not supported
        (Publish("a/b", b"x", retain=True), 0x9A),  # retain not supported
        (Publish("a/b", b"x", properties=Properties(topic_alias=4)), 0x94),  # above 3
        (Publish("", b"x", properties=Properties(topic_alias=2)), 0x82),  # alias never set
        (Publish("t/" + "x" * 70, b"x"), 0x90),  # beyond limits.max_topic_length
        (Publish("a/b", b"x" * 3000), 0x95),  # beyond limits.max_packet_size
    ],
    ids=["qos", "retain", "alias-above-maximum", "alias-unknown", "topic-too-long", "too-large"],
)
def test_a_publish_beyond_the_limits_gets_disconnect(
    limited: BrokerProcess, raw5: Raw5Factory, publish: Publish, code: int
) -> None:
    client = raw5(limited.port)
    client.connect(unique("v5"))
    client.send(publish)
    disconnect = client.disconnected()
    assert disconnect.reason_code == code
    assert reason_string(disconnect)


def test_receive_maximum_exceeded_gets_disconnect_0x93(
    limited: BrokerProcess, raw5: Raw5Factory
) -> None:
    """Two unanswered QoS 1 PUBLISHes are allowed (receive_maximum = 2), and answered ones
    free their slot; QoS 2 ones wait for their PUBCOMP, so a third before any PUBREL is one
    too many. (QoS 2 is above this broker's maximum: a second broker with defaults but
    receive_maximum = 2 is not needed, since QoS 1 shows the slot being freed.)"""
    client = raw5(limited.port)
    client.connect(unique("v5"))
    for packet_id in (1, 2, 3, 4):  # each answered before the next: never more than one
        client.send(Publish("a/b", b"x", qos=1, packet_id=packet_id))
        assert client.recv() == PubAck(packet_id)
    # Three at once: the broker may answer the first before the third arrives, so send
    # them in one write; the third is over the limit only if neither was answered yet.
    frames = b"".join(encode(Publish("a/b", b"y", qos=1, packet_id=i), V5) for i in (5, 6, 7))
    client.send_bytes(frames)
    seen = []
    while True:
        packet = client.recv()
        seen.append(packet)
        if isinstance(packet, Disconnect) or len([p for p in seen if isinstance(p, PubAck)]) == 3:
            break
    disconnects = [p for p in seen if isinstance(p, Disconnect)]
    assert disconnects and disconnects[0].reason_code == 0x93, seen


def test_qos2_publishes_count_until_pubcomp(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    config = write_config(tmp_path / "rm.toml", "[mqtt5]\nreceive_maximum = 2\n")
    broker = broker_factory(config=config)
    client = Raw5(broker.port)
    try:
        client.connect(unique("v5"))
        for packet_id in (1, 2):
            client.send(Publish("a/b", b"x", qos=2, packet_id=packet_id))
            assert client.recv() == PubRec(packet_id)
        client.send(PubRel(1))
        assert client.recv() == PubComp(1)
        client.send(Publish("a/b", b"x", qos=2, packet_id=3))  # slot 1 is free again
        assert client.recv() == PubRec(3)
        client.send(Publish("a/b", b"x", qos=2, packet_id=2, dup=True))  # a re-send
        assert client.recv() == PubRec(2)
        client.send(Publish("a/b", b"x", qos=2, packet_id=4))  # 2 and 3 unanswered
        assert client.disconnected().reason_code == 0x93
    finally:
        client.close()


def test_wildcards_refused_when_not_available(limited: BrokerProcess, raw5: Raw5Factory) -> None:
    client = raw5(limited.port)
    client.connect(unique("v5"))
    client.send(Subscribe(1, [("a/+", 1), ("a/b", 2), ("$share/g/a", 0)]))
    ack = client.recv()
    # QoS 2 is granted as 1, this broker's maximum.
    assert ack == SubAck(1, [0xA2, 0x01, 0x9E])


def test_suback_and_unsuback_reason_codes(broker: BrokerProcess, raw5: Raw5Factory) -> None:
    client = raw5(broker.port)
    client.connect(unique("v5"))
    client.send(Subscribe(1, [("a/#", 2), ("a/#/b", 0), ("$share/g/a", 1), ("$share/g+/a", 0)]))
    assert client.recv() == SubAck(1, [0x02, 0x8F, 0x01, 0x8F])
    client.send(Unsubscribe(2, ["a/#", "never/subscribed"]))
    assert client.recv() == UnsubAck(2, [0x00, 0x11])


def test_subscription_identifier_is_a_protocol_error_when_unavailable(
    limited: BrokerProcess, raw5: Raw5Factory
) -> None:
    client = raw5(limited.port)
    client.connect(unique("v5"))
    client.send(Subscribe(1, [("a/b", 1)], properties=Properties(subscription_identifiers=[7])))
    assert client.disconnected().reason_code == 0xA1


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x30\x05\x00\x01a\x05\x26", 0x81),  # a property block running past the packet
        (b"\x10\x00", 0x81),  # a second CONNECT, and a malformed one
        (b"\xf0\x00", 0x82),  # AUTH without an authentication method
        (b"\x20\x03\x00\x00\x00", 0x82),  # CONNACK from a client
    ],
    ids=["bad-property", "connect-again", "auth", "connack"],
)
def test_protocol_errors_get_disconnect_before_the_close(
    broker: BrokerProcess, raw5: Raw5Factory, data: bytes, code: int
) -> None:
    client = raw5(broker.port)
    client.connect(unique("v5"))
    client.send_bytes(data)
    assert client.disconnected().reason_code == code


def test_a_second_connect_is_a_protocol_error(broker: BrokerProcess, raw5: Raw5Factory) -> None:
    client = raw5(broker.port)
    client.connect(unique("v5"))
    client.send(Connect(unique("again"), protocol_level=V5))
    assert client.disconnected().reason_code == 0x82


def test_payload_format_invalid(broker: BrokerProcess, raw5: Raw5Factory) -> None:
    """A payload said to be UTF-8 that is not: PUBACK 0x99 and the connection stays; at QoS
    0 there is no acknowledgement to say it in, so DISCONNECT 0x99."""
    client = raw5(broker.port)
    client.connect(unique("v5"))
    utf8 = Properties(payload_format_indicator=1)
    client.send(Publish("a/b", b"\xff\xfe", qos=1, packet_id=1, properties=utf8))
    assert client.recv() == PubAck(1, 0x99)
    client.send(Publish("a/b", "é".encode(), qos=1, packet_id=2, properties=utf8))
    assert client.recv() == PubAck(2)
    client.send(Publish("a/b", b"\xc3", properties=utf8))
    assert client.disconnected().reason_code == 0x99


def test_takeover_is_disconnect_0x8e(broker: BrokerProcess, raw5: Raw5Factory) -> None:
    client_id = unique("v5")
    first = raw5(broker.port)
    first.connect(client_id)
    raw5(broker.port).connect(client_id)
    assert first.disconnected().reason_code == 0x8E


def test_keep_alive_timeout_is_disconnect_0x8d(limited: BrokerProcess, raw5: Raw5Factory) -> None:
    """The server keep-alive (5 s here) replaces the client's 0: 7.5 s of silence ends it."""
    client = raw5(limited.port)
    ack = client.connect(unique("v5"), keepalive=0)
    assert ack.properties is not None and ack.properties.server_keep_alive == 5
    started = time.monotonic()
    assert client.disconnected(timeout=15).reason_code == 0x8D
    assert time.monotonic() - started >= 5


def test_unknown_authentication_method_is_connack_0x8c(
    broker: BrokerProcess, raw5: Raw5Factory
) -> None:
    client = raw5(broker.port)
    ack = client.connect(unique("v5"), properties=Properties(authentication_method="GS2-KRB5"))
    assert ack.return_code == 0x8C
    assert "GS2-KRB5" in reason_string(ack)
    assert client.wait_closed()


@pytest.fixture
def secured(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerProcess:
    text = users_and_acl(
        {"alice": "wonderland"},
        [("alice", "publish", "open/#", True), ("alice", "subscribe", "open/#", True)],
    )
    return broker_factory(config=write_config(tmp_path / "secured.toml", text))


def test_bad_password_and_denials_carry_reason_codes(
    secured: BrokerProcess, raw5: Raw5Factory
) -> None:
    refused = raw5(secured.port)
    ack = refused.connect(unique("v5"), username="alice", password=b"nope")
    assert ack.return_code == 0x86  # bad user name or password
    anonymous = raw5(secured.port)
    assert anonymous.connect(unique("v5")).return_code == 0x87  # not authorized
    client = raw5(secured.port)
    assert client.connect(unique("v5"), username="alice", password=b"wonderland").return_code == 0
    client.send(Publish("closed/x", b"x", qos=1, packet_id=1))
    assert client.recv() == PubAck(1, 0x87)
    client.send(Publish("closed/x", b"x", qos=2, packet_id=2))
    assert client.recv() == PubRec(2, 0x87)
    client.send(Subscribe(3, [("closed/#", 1), ("open/#", 1)]))
    assert client.recv() == SubAck(3, [0x87, 0x01])


def test_the_will_is_kept_by_disconnect_0x04(broker: BrokerProcess, raw5: Raw5Factory) -> None:
    topic = unique("will")
    watcher = raw5(broker.port)
    watcher.connect(unique("w"))
    watcher.send(Subscribe(1, [(topic, 0)]))
    assert watcher.recv() == SubAck(1, [0])
    leaving = raw5(broker.port)
    leaving.connect(unique("v5"), will=Will(topic, b"gone"))
    leaving.send(Disconnect(0x04))
    will = watcher.recv()
    assert isinstance(will, Publish) and will.payload == b"gone"
    # And reason 0 drops it.
    quiet = raw5(broker.port)
    quiet.connect(unique("v5"), will=Will(topic, b"never"))
    quiet.send(Disconnect())
    assert quiet.wait_closed()  # the broker is done with it: its will, if any, was routed
    # A sentinel on the same topic, routed after that will into the watcher's session,
    # arrives first: the will never came.
    sentinel = raw5(broker.port)
    sentinel.connect(unique("sentinel"))
    sentinel.send(Publish(topic, b"sentinel"))
    after = watcher.recv()
    assert isinstance(after, Publish) and after.payload == b"sentinel", after


def test_disconnect_may_not_set_an_expiry_the_connect_did_not(
    broker: BrokerProcess, raw5: Raw5Factory
) -> None:
    client = raw5(broker.port)
    client.connect(unique("v5"))
    client.send(Disconnect(properties=Properties(session_expiry_interval=60)))
    assert client.disconnected().reason_code == 0x82


def test_disabled_mqtt5_answers_connack_1(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    config = write_config(tmp_path / "off.toml", "[mqtt5]\nenabled = false\n")
    broker = broker_factory(config=config)
    client = RawClient(broker.port)  # bytes as they come: the answer is no 5.0 CONNACK
    try:
        client.send(encode(Connect(unique("v5"), protocol_level=V5), V5))
        p = client.recv_packet()
        assert (p.type, p.body) == (2, b"\x00\x01")  # the 3.1.1 CONNACK 1
        assert client.wait_closed()
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------
# paho-mqtt, MQTTv5


def publish_properties(**values: object) -> PahoProperties:
    props = PahoProperties(PacketTypes.PUBLISH)
    for name, value in values.items():
        setattr(props, name, value)
    return props


def connect_properties(**values: object) -> PahoProperties:
    props = PahoProperties(PacketTypes.CONNECT)
    for name, value in values.items():
        setattr(props, name, value)
    return props


def test_paho_properties_pass_through_at_every_qos(
    broker: BrokerProcess, paho_client: PahoFactory
) -> None:
    topic = unique("props")
    sub = paho_client(broker.port, version=V5)
    sub.subscribe(topic, qos=2)
    pub = paho_client(broker.port, version=V5)
    sent = publish_properties(
        UserProperty=[("k", "1"), ("k", "2"), ("other", "x")],
        ResponseTopic="reply/here",
        CorrelationData=b"\x00\x01\xff",
        ContentType="application/json",
        PayloadFormatIndicator=1,
        MessageExpiryInterval=120,
    )
    for qos in (0, 1, 2):
        pub.publish(topic, f'{{"qos": {qos}}}', qos=qos, properties=sent)
    received = sub.wait_messages(3, topic=topic)
    assert [m.payload for m in received] == [b'{"qos": 0}', b'{"qos": 1}', b'{"qos": 2}']
    for message in received:
        props = message.properties
        assert props.UserProperty == [("k", "1"), ("k", "2"), ("other", "x")]
        assert props.ResponseTopic == "reply/here"
        assert props.CorrelationData == b"\x00\x01\xff"
        assert props.ContentType == "application/json"
        assert props.PayloadFormatIndicator == 1
        assert 118 <= props.MessageExpiryInterval <= 120


def test_paho_between_protocol_levels(broker: BrokerProcess, paho_client: PahoFactory) -> None:
    """A 3.1.1 publisher reaches a 5.0 subscriber and the other way round; a 3.1.1
    subscriber gets the payload without the 5.0 properties."""
    topic = unique("levels")
    sub5 = paho_client(broker.port, version=V5)
    sub5.subscribe(topic, qos=1)
    sub4 = paho_client(broker.port)
    sub4.subscribe(topic, qos=1)
    paho_client(broker.port).publish(topic, b"from 3.1.1", qos=1)
    paho_client(broker.port, version=V5).publish(
        topic, b"from 5.0", qos=1, properties=publish_properties(UserProperty=[("a", "b")])
    )
    for client in (sub4, sub5):
        messages = client.wait_messages(2, topic=topic)
        assert sorted(m.payload for m in messages) == [b"from 3.1.1", b"from 5.0"]
    five = next(m for m in sub5.received(topic) if m.payload == b"from 5.0")
    assert five.properties.UserProperty == [("a", "b")]


def test_paho_topic_aliases_to_the_client(broker: BrokerProcess, paho_client: PahoFactory) -> None:
    """A subscriber allowing two aliases gets every message on the right topic, whether the
    broker sent the topic name, an alias, or (for the third topic) the name again. (paho
    hands an aliased message over with an empty topic: the test resolves the aliases.)"""
    base = unique("alias")
    sub = paho_client(broker.port, version=V5, properties=connect_properties(TopicAliasMaximum=2))
    sub.subscribe(f"{base}/#", qos=1)
    pub = paho_client(broker.port, version=V5)
    expected = []
    for round_ in range(3):
        for name in ("a", "b", "c"):
            pub.publish(f"{base}/{name}", f"{name}{round_}", qos=1)
            expected.append((f"{base}/{name}", f"{name}{round_}".encode()))
    aliases: dict[int, str] = {}
    resolved = []
    for message in sub.wait_messages(9):
        alias = getattr(message.properties, "TopicAlias", None)
        topic = message.topic
        if alias is not None and topic:
            aliases[alias] = topic
        elif alias is not None:
            topic = aliases[alias]
        resolved.append((topic, message.payload, alias, message.topic == ""))
    assert [(topic, payload) for topic, payload, _, _ in resolved] == expected
    # a and b got aliases 1 and 2, named once then used alone; c never had one.
    assert [(alias, empty) for _, _, alias, empty in resolved] == [
        (1, False),
        (2, False),
        (None, False),
        *[(1, True), (2, True), (None, False)] * 2,
    ]


def leave_a_session(
    paho_factory: PahoFactory, port: int, client_id: str, expiry: int, topic: str
) -> None:
    """A v5 session with a QoS 1 subscription to `topic`, lasting `expiry` s once left."""
    client = paho_factory(
        port, client_id, version=V5, properties=connect_properties(SessionExpiryInterval=expiry)
    )
    client.connect()
    client.subscribe(topic, qos=1)
    client.disconnect()


def test_paho_session_expiry_keeps_and_ends_sessions(
    broker: BrokerProcess, paho_factory: PahoFactory, paho_client: PahoFactory
) -> None:
    topic = unique("expiry")
    kept_id, short_id = unique("kept"), unique("short")
    for client_id, expiry in ((kept_id, 600), (short_id, 1)):
        leave_a_session(paho_factory, broker.port, client_id, expiry, topic)
    paho_client(broker.port, version=V5).publish(topic, b"while away", qos=1)
    time.sleep(3.0)  # the short session expires (housekeeping runs every second)
    kept = paho_factory(broker.port, kept_id, version=V5, clean=False)
    assert kept.connect() is True
    assert [m.payload for m in kept.wait_messages(1, topic=topic)] == [b"while away"]
    short = paho_factory(broker.port, short_id, version=V5, clean=False)
    assert short.connect() is False


def test_paho_message_expiry_drops_queued_messages(
    broker: BrokerProcess, paho_factory: PahoFactory, paho_client: PahoFactory
) -> None:
    topic = unique("msgexp")
    client_id = unique("away")
    away = paho_factory(
        broker.port, client_id, version=V5, properties=connect_properties(SessionExpiryInterval=60)
    )
    away.connect()
    away.subscribe(topic, qos=1)
    away.disconnect()
    pub = paho_client(broker.port, version=V5)
    pub.publish(topic, b"short", qos=1, properties=publish_properties(MessageExpiryInterval=1))
    pub.publish(topic, b"long", qos=1, properties=publish_properties(MessageExpiryInterval=100))
    time.sleep(2.2)
    back = paho_factory(broker.port, client_id, version=V5, clean=False)
    assert back.connect() is True
    [message] = back.wait_messages(1, topic=topic)
    assert message.payload == b"long"
    assert 95 <= message.properties.MessageExpiryInterval <= 98
    # The session's queue is delivered in order, ahead of a sentinel published now.
    pub.publish(topic, b"sentinel", qos=1)
    back.wait_messages(2, topic=topic)
    assert [m.payload for m in back.received(topic)] == [b"long", b"sentinel"]


def test_paho_maximum_packet_size_drops_large_messages(
    broker: BrokerProcess, paho_client: PahoFactory
) -> None:
    topic = unique("size")
    small = paho_client(
        broker.port, version=V5, properties=connect_properties(MaximumPacketSize=100)
    )
    small.subscribe(topic, qos=1)
    pub = paho_client(broker.port, version=V5)
    pub.publish(topic, b"x" * 200, qos=1)
    pub.publish(topic, b"x" * 200, qos=0)
    pub.publish(topic, b"fits", qos=1)
    assert [m.payload for m in small.wait_messages(1, topic=topic)] == [b"fits"]


def test_paho_retained_message_keeps_its_properties_across_a_restart(
    broker_factory: BrokerFactory, paho_client: PahoFactory
) -> None:
    broker = broker_factory()
    topic = unique("retained")
    paho_client(broker.port, version=V5).publish(
        topic,
        b"kept",
        qos=1,
        retain=True,
        properties=publish_properties(ContentType="text/plain", UserProperty=[("u", "v")]),
    )
    broker.kill()
    broker.start()
    sub = paho_client(broker.port, version=V5)
    sub.subscribe(topic, qos=1)
    [message] = sub.wait_messages(1, topic=topic)
    assert message.payload == b"kept" and message.retain
    assert message.properties.ContentType == "text/plain"
    assert message.properties.UserProperty == [("u", "v")]


def test_paho_session_and_properties_survive_sigkill(
    broker_factory: BrokerFactory, paho_factory: PahoFactory, paho_client: PahoFactory
) -> None:
    """A v5 persistent session (expiry 600 s) keeps its queue and the messages their
    properties across SIGKILL; a session of 2 s is gone after a restart that took longer."""
    broker = broker_factory()
    topic = unique("crash5")
    kept_id, short_id = unique("kept"), unique("short")
    for client_id, expiry in ((kept_id, 600), (short_id, 2)):
        leave_a_session(paho_factory, broker.port, client_id, expiry, topic)
    pub = paho_client(broker.port, version=V5)
    for i in range(20):
        pub.publish(
            topic, f"m{i}", qos=1, properties=publish_properties(UserProperty=[("i", str(i))])
        )
    pub.close()
    broker.kill()
    time.sleep(2.5)
    broker.start()
    kept = paho_factory(broker.port, kept_id, version=V5, clean=False)
    assert kept.connect() is True
    messages = kept.wait_messages(20, topic=topic)
    assert [m.payload for m in messages] == [f"m{i}".encode() for i in range(20)]
    assert [m.properties.UserProperty for m in messages] == [[("i", str(i))] for i in range(20)]
    time.sleep(1.5)  # housekeeping's first pass
    short = paho_factory(broker.port, short_id, version=V5, clean=False)
    assert short.connect() is False


# ---------------------------------------------------------------------------------------------
# Subscription options and identifiers


def subscribe_properties(identifier: int) -> PahoProperties:
    props = PahoProperties(PacketTypes.SUBSCRIBE)
    props.SubscriptionIdentifier = identifier
    return props


def identifiers(message: Received) -> list[int]:
    value = getattr(message.properties, "SubscriptionIdentifier", [])
    return list(value) if isinstance(value, list) else [value]


def test_no_local(broker: BrokerProcess, paho_client: PahoFactory) -> None:
    """No Local: a client is not sent what it publishes itself, unless another of its
    subscriptions matching the topic lacks the option."""
    base = unique("nolocal")
    me = paho_client(broker.port, version=V5)
    me.subscribe(f"{base}/+", options=SubscribeOptions(qos=1, noLocal=True))
    other = paho_client(broker.port, version=V5)
    me.publish(f"{base}/a", b"mine", qos=1)
    other.publish(f"{base}/a", b"theirs", qos=1)
    assert [m.payload for m in me.wait_messages(1)] == [b"theirs"]
    me.subscribe(f"{base}/#", qos=1)  # overlapping, without No Local
    me.publish(f"{base}/b", b"mine again", qos=1)
    assert [m.payload for m in me.wait_messages(2)] == [b"theirs", b"mine again"]


def test_retain_as_published(broker: BrokerProcess, paho_client: PahoFactory) -> None:
    topic = unique("rap")
    kept = paho_client(broker.port, version=V5)
    kept.subscribe(topic, options=SubscribeOptions(qos=1, retainAsPublished=True))
    cleared = paho_client(broker.port, version=V5)
    cleared.subscribe(topic, qos=1)
    paho_client(broker.port, version=V5).publish(topic, b"live", qos=1, retain=True)
    assert [m.retain for m in kept.wait_messages(1)] == [True]
    assert [m.retain for m in cleared.wait_messages(1)] == [False]


def test_retain_handling(broker: BrokerProcess, paho_client: PahoFactory) -> None:
    """0: the retained message on every SUBSCRIBE; 1: only for a new subscription; 2: never."""
    topic = unique("handling")
    paho_client(broker.port, version=V5).publish(topic, b"retained", qos=1, retain=True)
    sender = paho_client(broker.port, version=V5)
    for handling, expected in ((0, 2), (1, 1), (2, 0)):
        client = paho_client(broker.port, version=V5)
        for _ in range(2):
            client.subscribe(topic, options=SubscribeOptions(qos=1, retainHandling=handling))
        # The broker sends a subscription's retained message right after its SUBACK, so
        # before a sentinel (not retained) published after the SUBACKs.
        sender.publish(topic, b"sentinel", qos=1)
        client.wait_messages(1 + expected, topic=topic)
        got = [m.payload for m in client.received(topic)]
        assert got[-1] == b"sentinel", (handling, got)
        assert len(got[:-1]) == expected, handling


def test_subscription_identifiers_on_deliveries(
    broker: BrokerProcess, paho_client: PahoFactory
) -> None:
    """Each delivery carries the identifiers of the client's subscriptions that match it
    (one copy with all of them); the retained copy on subscribing carries its own."""
    base = unique("subid")
    publisher = paho_client(broker.port, version=V5)
    publisher.publish(f"{base}/r", b"retained", qos=1, retain=True)
    client = paho_client(broker.port, version=V5)
    client.subscribe(f"{base}/#", qos=1, properties=subscribe_properties(7))
    [retained] = client.wait_messages(1)
    assert identifiers(retained) == [7]
    client.subscribe(f"{base}/a", qos=1, properties=subscribe_properties(300))
    # No identifier, and not the retained message again.
    client.subscribe(f"{base}/+", options=SubscribeOptions(qos=0, retainHandling=2))
    publisher.publish(f"{base}/a", b"both", qos=1)
    publisher.publish(f"{base}/b", b"one", qos=0)
    received = client.wait_messages(3)
    assert [(m.payload, sorted(identifiers(m))) for m in received[1:]] == [
        (b"both", [7, 300]),
        (b"one", [7]),
    ]


def test_subscription_identifiers_survive_a_restart(
    broker_factory: BrokerFactory, paho_factory: PahoFactory, paho_client: PahoFactory
) -> None:
    broker = broker_factory()
    topic = unique("subid-crash")
    client_id = unique("away")
    away = paho_factory(
        broker.port, client_id, version=V5, properties=connect_properties(SessionExpiryInterval=600)
    )
    away.connect()
    away.subscribe(topic, qos=1, properties=subscribe_properties(42))
    away.disconnect()
    paho_client(broker.port, version=V5).publish(topic, b"queued", qos=1)
    broker.kill()
    broker.start()
    back = paho_factory(broker.port, client_id, version=V5, clean=False)
    assert back.connect() is True
    [message] = back.wait_messages(1, topic=topic)
    assert identifiers(message) == [42]
    paho_client(broker.port, version=V5).publish(topic, b"after", qos=1)
    assert [identifiers(m) for m in back.wait_messages(2, topic=topic)] == [[42], [42]]


# ---------------------------------------------------------------------------------------------
# Shared subscriptions


def test_shared_subscription_takes_turns_and_keeps_no_retained(
    broker: BrokerProcess, paho_client: PahoFactory
) -> None:
    """Members of `$share/g/...` (5.0 and 3.1.1 alike) each get every other message; a
    retained message is not sent to a shared subscription (MQTT 5.0 §4.8.2)."""
    topic = unique("shared")
    publisher = paho_client(broker.port, version=V5)
    publisher.publish(topic, b"retained", qos=1, retain=True)
    members = [paho_client(broker.port, version=V5), paho_client(broker.port)]
    for member in members:
        assert member.subscribe(f"$share/g/{topic}", qos=1) == [1]
    for index in range(6):
        publisher.publish(topic, f"m{index}", qos=1)
    got = [[m.payload for m in member.wait_messages(3)] for member in members]
    assert sorted(got[0] + got[1]) == [f"m{index}".encode() for index in range(6)]
    # A sentinel to each member (its own, not shared, subscription) from the same
    # publisher comes after anything more it was sent: one session, delivered in order.
    for index, member in enumerate(members):
        member.subscribe(f"{topic}/sentinel/{index}", qos=1)
        publisher.publish(f"{topic}/sentinel/{index}", b"sentinel", qos=1)
        member.wait_messages(1, topic=f"{topic}/sentinel/{index}")
    assert [len(member.received(topic)) for member in members] == [3, 3]


def test_no_local_on_a_shared_subscription_is_a_protocol_error(
    broker: BrokerProcess, raw5: Raw5Factory
) -> None:
    client = raw5(broker.port)
    client.connect(unique("v5"))
    client.send(Subscribe(1, [(f"$share/g/{unique('t')}", 0x05)]))  # QoS 1, No Local
    assert client.disconnected().reason_code == 0x82


def test_a_leaving_member_hands_its_unacknowledged_messages_on(
    broker: BrokerProcess, raw5: Raw5Factory, paho_client: PahoFactory
) -> None:
    """A member that leaves without acknowledging its QoS 1 messages: they go to the
    member that stays, which ends up with every message."""
    topic = unique("handover")
    leaving = raw5(broker.port)
    leaving.connect(unique("leaving"))
    leaving.send(Subscribe(1, [(f"$share/g/{topic}", 1)]))
    assert leaving.recv() == SubAck(1, [1])
    staying = paho_client(broker.port, version=V5)
    staying.subscribe(f"$share/g/{topic}", qos=1)
    publisher = paho_client(broker.port, version=V5)
    for index in range(4):
        publisher.publish(topic, f"m{index}", qos=1)
    unanswered = [leaving.recv() for _ in range(2)]  # never acknowledged
    assert all(isinstance(p, Publish) for p in unanswered)
    leaving.close()
    got = [m.payload for m in staying.wait_messages(4)]
    assert sorted(got) == [f"m{index}".encode() for index in range(4)]


def test_shared_subscriptions_of_persistent_sessions_survive_a_restart(
    broker_factory: BrokerFactory, paho_factory: PahoFactory, paho_client: PahoFactory
) -> None:
    """Members with persistent sessions: after SIGKILL the group is still there, and the
    messages published while both were away are shared between them when they return."""
    broker = broker_factory()
    topic = unique("shared-crash")
    ids = [unique("member") for _ in range(2)]
    for client_id in ids:
        client = paho_factory(
            broker.port,
            client_id,
            version=V5,
            properties=connect_properties(SessionExpiryInterval=600),
        )
        client.connect()
        client.subscribe(f"$share/g/{topic}", qos=1)
        client.disconnect()
    publisher = paho_client(broker.port, version=V5)
    for index in range(6):
        publisher.publish(topic, f"m{index}", qos=1)
    broker.kill()
    broker.start()
    members = [paho_factory(broker.port, client_id, version=V5, clean=False) for client_id in ids]
    for member in members:
        assert member.connect() is True

    def delivered() -> list[bytes]:
        return sorted(m.payload for member in members for m in member.received(topic))

    assert wait_until(lambda: len(delivered()) >= 6, 10.0), delivered()
    got = delivered()
    assert got == [f"m{index}".encode() for index in range(6)]
    assert all(member.received(topic) for member in members)  # both had some


# ---------------------------------------------------------------------------------------------
# telemq's own client at 5.0


def test_telemq_client_speaks_5_0(broker: BrokerProcess, paho_client: PahoFactory) -> None:
    """`telemq.client.MqttClient(protocol_level=5)`: a persistent session comes back, a
    publication's properties reach a paho subscriber, and the client receives 5.0 PUBLISHes."""
    topic = unique("tclient")
    watcher = paho_client(broker.port, version=V5)
    watcher.subscribe(topic, qos=1)
    client_id = unique("tclient")
    with MqttClient("127.0.0.1", broker.port, client_id, protocol_level=5, clean_session=False):
        pass
    with MqttClient(
        "127.0.0.1", broker.port, client_id, protocol_level=5, clean_session=False
    ) as client:
        assert client.session_present
        assert client.subscribe([(topic, 1)]) == [1]
        client.publish(topic, b"hello", 1, properties=Properties(user_properties=[("k", "v")]))
        client.flush()
        [message] = watcher.wait_messages(1, topic=topic)
        assert message.properties.UserProperty == [("k", "v")]
        received = client.receive(10)
        assert received is not None and received.payload == b"hello"
        assert received.properties is not None
        assert received.properties.user_properties == [("k", "v")]


def test_telemq_client_reports_refusals_at_5_0(secured: BrokerProcess) -> None:
    """At 5.0 the broker says no to a denied PUBLISH (PUBACK 0x87) and the client raises
    naming the reason; at 3.1.1 it could not know."""
    with (
        MqttClient(
            "127.0.0.1",
            secured.port,
            unique("tc"),
            username="alice",
            password="wonderland",
            protocol_level=5,
        ) as client,
        pytest.raises(MqttError, match="0x87 not authorized"),
    ):
        client.publish("closed/x", b"x", 1)  # the PUBACK may be read here already
        client.flush()
