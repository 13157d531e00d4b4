"""The client side of a connection, sans-IO (`protocol.client.ClientConnection`): the core
that `telemq.client.MqttClient` (the `telemq subs` commands, the pipeline's sink, the demo)
runs on. Bytes in, events and bytes out; no socket."""

from __future__ import annotations

import pytest

from telemq.protocol import (
    ConnAck,
    Decoder,
    Disconnect,
    LocalProtocolError,
    MalformedPacket,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    encode,
)
from telemq.protocol.client import (
    ClientConnection,
    ConnectAnswered,
    Disconnected,
    MessageArrived,
    SubscribeAnswered,
)
from telemq.protocol.packets import Connect, Packet, Subscribe


def sent(core: ClientConnection) -> list[Packet]:
    """What the core queued for the broker, decoded."""
    return list(Decoder().feed(core.data_to_send()))


def test_connect_and_subscribe_are_answered_by_events() -> None:
    core = ClientConnection()
    core.connect("c1", clean_session=False, keepalive=30, username="u", password=b"p")
    (connect,) = sent(core)
    assert isinstance(connect, Connect)
    assert (connect.client_id, connect.clean_session, connect.keepalive) == ("c1", False, 30)
    assert (connect.username, connect.password) == ("u", b"p")
    assert core.receive_data(encode(ConnAck(0, True))) == [ConnectAnswered(0, True)]
    packet_id = core.subscribe([("a/#", 1), ("b", 2)])
    (subscribe,) = sent(core)
    assert subscribe == Subscribe(packet_id, [("a/#", 1), ("b", 2)])
    answer = core.receive_data(encode(SubAck(packet_id, [1, 0x80])))
    assert answer == [SubscribeAnswered(packet_id, [1, 0x80])]


def test_completed_counts_publications_in_order_as_they_are_acknowledged() -> None:
    core = ClientConnection(window=3)
    core.publish("t", b"0", 0)
    core.publish("t", b"1", 1)
    core.publish("t", b"2", 2)
    core.publish("t", b"3", 1)
    packets = sent(core)
    assert [p.payload for p in packets if isinstance(p, Publish)] == [b"0", b"1", b"2", b"3"]
    ids = [p.packet_id for p in packets if isinstance(p, Publish) and p.qos]
    assert core.completed == 1 and core.in_flight == 3 and core.window_full
    with pytest.raises(LocalProtocolError):
        core.publish("t", b"4", 1)
    core.receive_data(encode(PubAck(ids[2])))  # the last one first: not counted yet
    assert core.completed == 1
    core.receive_data(encode(PubAck(ids[0])))
    assert core.completed == 2
    core.receive_data(encode(PubRec(ids[1])))
    assert sent(core) == [PubRel(ids[1])]
    assert core.completed == 2
    core.receive_data(encode(PubComp(ids[1])))
    assert core.completed == 4 and core.in_flight == 0


def test_a_qos2_message_sent_again_before_pubrel_is_reported_once() -> None:
    core = ClientConnection()
    first = Publish("t", b"x", 2, packet_id=7)
    assert core.receive_data(encode(first)) == [MessageArrived(first)]
    assert sent(core) == [PubRec(7)]
    again = Publish("t", b"x", 2, packet_id=7, dup=True)
    assert core.receive_data(encode(again)) == []  # acknowledged again, not reported
    assert sent(core) == [PubRec(7)]
    assert core.receive_data(encode(PubRel(7))) == []
    assert sent(core) == [PubComp(7)]
    qos1 = Publish("t", b"y", 1, packet_id=8)
    assert core.receive_data(encode(qos1)) == [MessageArrived(qos1)]
    assert sent(core) == [PubAck(8)]


def test_bad_input_is_refused_with_a_reason() -> None:
    core = ClientConnection()
    with pytest.raises(ValueError, match="wildcard"):
        core.publish("a/+", b"")
    with pytest.raises(ValueError, match="QoS must be 0, 1 or 2"):
        core.publish("a", b"", 3)
    with pytest.raises(MalformedPacket):
        core.receive_data(b"\x00\x00")  # packet type 0 is reserved


# ---------------------------------------------------------------------------------------------
# MQTT 5.0


def sent5(core: ClientConnection) -> list[Packet]:
    """What a 5.0 core queued, decoded as the broker reads it."""
    return list(Decoder(mqtt5=True).feed(core.data_to_send()))


def test_a_5_0_connect_asks_for_a_session_expiry() -> None:
    core = ClientConnection(protocol_level=5)
    core.connect("c5", clean_session=False)
    (connect,) = sent5(core)
    assert isinstance(connect, Connect) and connect.protocol_level == 5
    assert connect.properties is not None
    assert connect.properties.session_expiry_interval == 0xFFFFFFFF  # persistent: for ever
    core.connect("c5", clean_session=False, session_expiry_interval=60)
    (connect,) = sent5(core)
    assert isinstance(connect, Connect) and connect.properties is not None
    assert connect.properties.session_expiry_interval == 60
    core.connect("c5")  # clean: no expiry, so no property
    (connect,) = sent5(core)
    assert isinstance(connect, Connect) and connect.properties is None


def test_a_5_0_publish_carries_its_properties() -> None:
    core = ClientConnection(protocol_level=5)
    core.connect("c5")
    core.data_to_send()
    props = Properties(user_properties=[("k", "v")], content_type="text/plain")
    core.publish("a/b", b"x", 1, properties=props)
    decoder = Decoder(protocol_level=5, mqtt5=True)
    (publish,) = decoder.feed(core.data_to_send())
    assert isinstance(publish, Publish) and publish.properties is not None
    assert publish.properties.user_properties == [("k", "v")]
    assert publish.properties.content_type == "text/plain"


def test_properties_need_5_0() -> None:
    core = ClientConnection()
    with pytest.raises(ValueError, match=r"need MQTT 5\.0"):
        core.publish("a/b", b"x", 1, properties=Properties(content_type="x"))
    with pytest.raises(ValueError, match="protocol level"):
        ClientConnection(protocol_level=3)


def test_refusals_end_the_exchange_and_are_kept() -> None:
    """PUBACK 0x87, or PUBREC 0x87 (no PUBREL follows): the publication is done with, and
    the refusal kept for the caller to report."""
    core = ClientConnection(protocol_level=5)
    core.publish("a", b"1", 1)
    core.publish("a", b"2", 2)
    core.data_to_send()
    core.receive_data(encode(PubAck(1, 0x87), 5))
    core.receive_data(encode(PubRec(2, 0x87), 5))
    assert core.data_to_send() == b""  # no PUBREL
    assert core.completed == 2 and core.in_flight == 0
    assert core.refusals == [(1, 0x87), (2, 0x87)]


def test_a_disconnect_from_the_broker_is_reported() -> None:
    core = ClientConnection(protocol_level=5)
    data = encode(Disconnect(0x8E, Properties(reason_string="taken over")), 5)
    assert core.receive_data(data) == [Disconnected(0x8E, "taken over")]
