"""MQTT 5.0 at the edges, over real sockets: a will the broker could not publish as given,
the session expiry changed at DISCONNECT, message expiry of messages in flight (across a
reconnection and a SIGKILL), the drop counters, the protocol errors of properties and
aliases, errors during enhanced authentication, and shared-subscription QoS 2 handover
(docs/mqtt5.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from telemq.protocol import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Properties,
    PubAck,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Will,
)
from telemq.protocol.scram import METHOD as SCRAM
from telemq.protocol.scram import ScramClient
from testsupport.paho import sys_value
from testsupport.process import users_and_acl
from testsupport.raw5 import V5, Raw5, Raw5Factory

from .helpers import BrokerProcess, PahoClient, unique, wait_until, write_config
from .test_41_mqtt5 import connect_properties, publish_properties

BrokerFactory = Callable[..., BrokerProcess]
PahoFactory = Callable[..., PahoClient]


@pytest.fixture
def strict(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerProcess:
    """Maximum QoS 1, no retain, one connection, two subscriptions per session, and $SYS
    every 0.2 s."""
    config = write_config(
        tmp_path / "strict.toml",
        "[sys]\ninterval = 0.2\n"
        "[limits]\nmax_connections = 1\nmax_subscriptions_per_client = 2\n"
        "[mqtt5]\nmaximum_qos = 1\nretain_available = false\n",
    )
    return broker_factory(config=config)


@pytest.mark.parametrize(
    ("will", "code"),
    [(Will("w/t", b"x", qos=2), 0x9B), (Will("w/t", b"x", qos=1, retain=True), 0x9A)],
    ids=["qos-above-maximum", "retain-not-available"],
)
def test_a_will_the_broker_could_not_publish_is_refused(
    strict: BrokerProcess, raw5: Raw5Factory, will: Will, code: int
) -> None:
    ack = raw5(strict.port).connect(unique("will"), will=will)
    assert ack.return_code == code
    assert ack.properties is not None and "will" in (ack.properties.reason_string or "")


def test_connack_0x88_0x85_and_suback_0x97(strict: BrokerProcess, raw5: Raw5Factory) -> None:
    reserved = raw5(strict.port).connect("$bridge/mine")
    assert reserved.return_code == 0x85  # client identifier not valid
    first = raw5(strict.port)
    assert first.connect(unique("one")).return_code == 0
    assert raw5(strict.port).connect(unique("two")).return_code == 0x88  # max_connections
    first.send(Subscribe(1, [("a/1", 1), ("a/2", 1), ("a/3", 1)]))
    assert first.recv() == SubAck(1, [1, 1, 0x97])  # quota exceeded


def test_the_expiry_set_at_disconnect_is_the_one_that_counts(
    broker: BrokerProcess, raw5: Raw5Factory
) -> None:
    """Longer at DISCONNECT: the session outlives what CONNECT asked; 0: it ends now."""
    kept, ended = unique("kept"), unique("ended")
    for client_id, at_connect, at_disconnect in ((kept, 1, 600), (ended, 600, 0)):
        client = raw5(broker.port)
        client.connect(client_id, properties=Properties(session_expiry_interval=at_connect))
        client.send(Disconnect(properties=Properties(session_expiry_interval=at_disconnect)))
        assert client.wait_closed()
    time.sleep(2.5)  # past CONNECT's 1 s, and housekeeping (every second) has run
    for client_id, present in ((kept, True), (ended, False)):
        ack = raw5(broker.port).connect(client_id, clean=False)
        assert ack.session_present is present, client_id


def expiry_of(packet: Publish) -> int | None:
    return None if packet.properties is None else packet.properties.message_expiry_interval


def test_a_message_in_flight_is_resent_with_what_is_left_of_its_expiry(
    broker_factory: BrokerFactory, raw5: Raw5Factory, paho_client: PahoFactory
) -> None:
    broker = broker_factory()
    topic, client_id = unique("inflight"), unique("slow")
    session = Properties(session_expiry_interval=600)
    reader = raw5(broker.port)
    reader.connect(client_id, properties=session)
    reader.send(Subscribe(1, [(topic, 1)]))
    assert reader.recv() == SubAck(1, [1])
    publisher = paho_client(broker.port, version=V5)
    publisher.publish(topic, b"m", qos=1, properties=publish_properties(MessageExpiryInterval=4))
    first = reader.recv()
    assert isinstance(first, Publish) and expiry_of(first) in (3, 4)
    reader.close()  # never acknowledged
    time.sleep(1.5)
    again = raw5(broker.port)
    assert again.connect(client_id, clean=False, properties=session).session_present
    resent = again.recv()
    assert isinstance(resent, Publish) and resent.dup and resent.payload == b"m"
    assert expiry_of(resent) in (2, 3)  # what is left, not what was left at first
    again.close()
    # Past its expiry while the broker is down: still in flight, so sent, and still
    # saying it expires (at least a second), not as if it never did.
    broker.kill()
    time.sleep(3.0)
    broker.start()
    last = raw5(broker.port)
    assert last.connect(client_id, clean=False, properties=session).session_present
    after = last.recv()
    assert isinstance(after, Publish) and after.dup and expiry_of(after) == 1
    last.send(PubAck(after.packet_id))


def test_too_large_and_expired_drops_are_counted(
    broker_factory: BrokerFactory, tmp_path: Path, paho_factory: PahoFactory
) -> None:
    broker = broker_factory(config=write_config(tmp_path / "sys.toml", "[sys]\ninterval = 0.2\n"))
    topic, client_id = unique("drops"), unique("away")
    small = paho_factory(
        broker.port, version=V5, properties=connect_properties(MaximumPacketSize=100)
    )
    small.connect()
    small.subscribe(topic + "/big", qos=1)
    away = paho_factory(
        broker.port, client_id, version=V5, properties=connect_properties(SessionExpiryInterval=60)
    )
    away.connect()
    away.subscribe(topic + "/short", qos=1)
    away.disconnect()
    publisher = paho_factory(broker.port, version=V5)
    publisher.connect()
    for _index in range(3):
        publisher.publish(topic + "/big", b"x" * 200, qos=1)
    for _index in range(2):
        props = publish_properties(MessageExpiryInterval=1)
        publisher.publish(topic + "/short", b"s", qos=1, properties=props)
    time.sleep(1.5)
    back = paho_factory(broker.port, client_id, version=V5, clean=False)
    assert back.connect() is True  # its two queued messages have expired: dropped now
    assert wait_until(
        lambda: sys_value(broker.port, "$SYS/broker/messages/dropped/too large") == "3", 5.0
    )
    assert wait_until(
        lambda: sys_value(broker.port, "$SYS/broker/messages/dropped/expired") == "2", 5.0
    )
    # The session's queue comes first; a sentinel published now comes after it.
    publisher.publish(topic + "/short", b"sentinel", qos=1)
    back.wait_messages(1, topic=topic + "/short")
    assert [m.payload for m in back.received(topic + "/short")] == [b"sentinel"]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        # PUBLISH "a" with Payload Format Indicator twice: a duplicate property.
        (b"\x30\x09\x00\x01a\x04\x01\x01\x01\x01x", 0x82),
        # PUBLISH carrying a Session Expiry Interval, which a PUBLISH may not carry.
        (b"\x30\x0a\x00\x01a\x05\x11\x00\x00\x00\x3cx", 0x81),
        # Topic Alias 0.
        (b"\x30\x08\x00\x01a\x03\x23\x00\x00x", 0x94),
        # An empty topic and no Topic Alias.
        (b"\x30\x04\x00\x00\x00x", 0x82),
    ],
    ids=["duplicate-property", "property-not-allowed", "topic-alias-0", "empty-topic"],
)
def test_property_and_alias_errors_over_a_socket(
    broker: BrokerProcess, raw5: Raw5Factory, data: bytes, code: int
) -> None:
    client = raw5(broker.port)
    client.connect(unique("v5"))
    client.send_bytes(data)
    assert client.disconnected().reason_code == code


@pytest.fixture
def scram(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerProcess:
    users = users_and_acl({"alice": "secret"}, [])  # hashes SCRAM can use
    return broker_factory(config=write_config(tmp_path / "scram.toml", users))


def scram_connect(client: Raw5) -> tuple[ScramClient, Auth]:
    """CONNECT with SCRAM-SHA-256's first message: the broker's AUTH 0x18 comes back."""
    scram = ScramClient("alice", "secret")
    client.send(
        Connect(
            unique("scram"),
            protocol_level=V5,
            properties=Properties(authentication_method=SCRAM, authentication_data=scram.first()),
        )
    )
    challenge = client.recv()
    assert isinstance(challenge, Auth) and challenge.reason_code == 0x18
    return scram, challenge


def test_a_packet_out_of_turn_during_authentication_is_connack_0x82(
    scram: BrokerProcess, raw5: Raw5Factory
) -> None:
    client = raw5(scram.port)
    scram_connect(client)
    client.send(Publish("a/b", b"too early"))
    ack = client.recv()
    assert isinstance(ack, ConnAck) and ack.return_code == 0x82
    assert client.wait_closed()


def test_a_reauthentication_out_of_turn_is_disconnect_0x82(
    scram: BrokerProcess, raw5: Raw5Factory
) -> None:
    client = raw5(scram.port)
    exchange, challenge = scram_connect(client)
    assert challenge.properties is not None
    final = exchange.final(challenge.properties.authentication_data)
    client.send(Auth(0x18, Properties(authentication_method=SCRAM, authentication_data=final)))
    ack = client.recv()
    assert isinstance(ack, ConnAck) and ack.return_code == 0
    # A re-authentication starts with 0x19, and its next step is 0x18: 0x19 twice is not.
    again = ScramClient("alice", "secret")
    start = Properties(authentication_method=SCRAM, authentication_data=again.first())
    client.send(Auth(0x19, start))
    assert isinstance(client.recv(), Auth)  # the broker's 0x18
    client.send(Auth(0x19, start))
    assert client.disconnected().reason_code == 0x82


def test_a_leaving_member_hands_on_qos2_messages_it_had_not_received(
    broker: BrokerProcess, raw5: Raw5Factory, paho_client: PahoFactory
) -> None:
    """QoS 2 in a shared group: what the leaving member never answered with PUBREC goes to
    the member that stays; what it had received (PUBREC sent) was its own and does not."""
    topic = unique("handover2")
    leaving = raw5(broker.port)
    leaving.connect(unique("leaving"))
    leaving.send(Subscribe(1, [(f"$share/g/{topic}", 2)]))
    assert leaving.recv() == SubAck(1, [2])
    staying = paho_client(broker.port, version=V5)
    staying.subscribe(f"$share/g/{topic}", qos=2)
    publisher = paho_client(broker.port, version=V5)
    for index in range(4):
        publisher.publish(topic, f"m{index}", qos=2)
    given = [leaving.recv() for _ in range(2)]
    assert all(isinstance(p, Publish) and p.qos == 2 for p in given)
    received, _unanswered = given
    assert isinstance(received, Publish)
    leaving.send(PubRec(received.packet_id))
    assert leaving.recv() == PubRel(received.packet_id)
    leaving.close()
    got = sorted(m.payload for m in staying.wait_messages(3))
    everything = [f"m{index}".encode() for index in range(4)]
    assert got == sorted(p for p in everything if p != received.payload)
    # Nothing more: a sentinel from the same publisher, to the same session (its own
    # subscription), arrives after anything else it was to get.
    staying.subscribe(f"{topic}/sentinel", qos=2)
    publisher.publish(f"{topic}/sentinel", b"sentinel", qos=2)
    staying.wait_messages(1, topic=f"{topic}/sentinel")
    assert not len(staying.received(topic)) > 3


def test_the_pipeline_sink_connects_at_5_0_when_asked(tmp_path: Path) -> None:
    """Proof on the wire: a broker with 5.0 turned off refuses the sink's CONNECT at
    `protocol=5` (CONNACK 1), and takes the same rows at 3.1.1."""
    from telemq.client import MqttError
    from telemq.pipeline.sink import SinkOptions, publish_rows

    broker = BrokerProcess(tmp_path / "off", config_text="[mqtt5]\nenabled = false\n").start()
    try:
        rows = [{"topic": "sink5/t", "payload": b"x"}]
        options = SinkOptions.parse({"port": str(broker.port), "protocol": "5"})
        with pytest.raises(MqttError, match="refused"):
            publish_rows(iter(rows), options)
        plain = SinkOptions.parse({"port": str(broker.port)})
        assert publish_rows(iter(rows), plain).published == 1
    finally:
        broker.finalize()


def test_the_broker_never_exceeds_the_clients_receive_maximum(
    broker: BrokerProcess, raw5: Raw5Factory, paho_client: PahoFactory
) -> None:
    """Receive Maximum 1: one QoS 1 PUBLISH unacknowledged at a time, the next one only after
    the PUBACK."""
    topic = unique("recvmax")
    reader = raw5(broker.port)
    reader.connect(unique("one-at-a-time"), properties=Properties(receive_maximum=1))
    reader.send(Subscribe(1, [(topic, 1)]))
    assert reader.recv() == SubAck(1, [1])
    publisher = paho_client(broker.port, version=V5)
    for index in range(3):
        publisher.publish(topic, f"m{index}", qos=1)
    for index in range(3):
        packet = reader.recv()
        assert isinstance(packet, Publish) and packet.payload == f"m{index}".encode()
        # Nothing more before the PUBACK: a QoS 0 sentinel, which Receive Maximum does not
        # hold back (MQTT 5.0 §4.9), published now comes next; the QoS 1 messages after
        # this one were routed before it, so one sent too early would have come first.
        publisher.publish(topic, f"sentinel {index}", qos=0)
        after = reader.recv()
        assert isinstance(after, Publish) and after.payload == f"sentinel {index}".encode()
        reader.send(PubAck(packet.packet_id))


def test_a_client_silent_in_the_authentication_exchange_gets_connack_0x80(
    broker_factory: BrokerFactory, tmp_path: Path, raw5: Raw5Factory
) -> None:
    text = users_and_acl({"alice": "secret"}, []) + "\n[limits]\nconnect_timeout = 1\n"
    broker = broker_factory(config=write_config(tmp_path / "slow-auth.toml", text))
    client = raw5(broker.port)
    scram_connect(client)  # and no answer to the broker's AUTH
    ack = client.recv(timeout=5.0)
    assert isinstance(ack, ConnAck) and ack.return_code == 0x80
    assert client.wait_closed()
