"""CONNECT / CONNACK: protocol levels, return codes, client ids and session present.

Raw sockets are used where paho would hide the bytes (return codes, session present, closes).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .helpers import (
    MQTT31,
    MQTT311,
    ConnectionClosed,
    Packet,
    PahoClient,
    RawClient,
    connect_packet,
    parse_connack,
    roundtrip,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

RawFactory = Callable[..., RawClient]


@pytest.mark.parametrize("version", [MQTT31, MQTT311], ids=["mqtt31", "mqtt311"])
def test_connect_accepted(port: int, raw_factory: RawFactory, version: int) -> None:
    client = raw_factory(port)
    ack = client.connect(unique("c"), version=version)
    assert ack.return_code == 0
    assert ack.session_present == 0
    assert client.is_open()


@pytest.mark.parametrize("level", [2, 6, 42])
def test_unsupported_protocol_level_gets_connack_1_and_close(
    port: int, raw_factory: RawFactory, level: int
) -> None:
    """An unknown level gets the 3.1.1 answer: CONNACK 1 and close (level 5, MQTT 5.0, is
    tested in test_41_mqtt5)."""
    client = raw_factory(port)
    client.send(connect_packet(unique("lvl"), version=level, protocol_name=b"MQTT"))
    ack = parse_connack(client.recv_packet())
    assert ack.return_code == 1
    assert ack.session_present == 0
    assert client.wait_closed()


def test_mqtt31_client_id_longer_than_23_is_rejected(port: int, raw_factory: RawFactory) -> None:
    client = raw_factory(port)
    ack = client.connect("x" * 24, version=MQTT31)
    assert ack.return_code == 2
    assert client.wait_closed()


def test_mqtt31_client_id_of_23_is_accepted(port: int, raw_factory: RawFactory) -> None:
    client = raw_factory(port)
    ack = client.connect(unique("c").ljust(23, "z"), version=MQTT31)
    assert ack.return_code == 0


def test_mqtt31_empty_client_id_is_rejected(port: int, raw_factory: RawFactory) -> None:
    """3.1 requires a 1-23 character client id."""
    client = raw_factory(port)
    ack = client.connect("", version=MQTT31)
    assert ack.return_code == 2
    assert client.wait_closed()


def test_mqtt311_empty_client_id_with_clean_session_gets_an_id(
    port: int, raw_factory: RawFactory
) -> None:
    """Two clients with an empty id get different assigned ids: neither takes the other over,
    and each can subscribe and receive."""
    first = raw_factory(port)
    second = raw_factory(port)
    assert first.connect("", clean=True).return_code == 0
    assert second.connect("", clean=True).return_code == 0
    topic = unique("empty/")
    assert first.subscribe([(topic, 1)]) == [1]
    assert second.subscribe([(topic, 1)]) == [1]
    publisher = raw_factory(port, connected=True)
    publisher.publish(topic, b"to both", qos=1)
    for client in (first, second):
        (msg,) = client.collect(1)
        assert msg.payload == b"to both"


def test_mqtt311_empty_client_id_without_clean_session_is_rejected(
    port: int, raw_factory: RawFactory
) -> None:
    client = raw_factory(port)
    ack = client.connect("", clean=False)
    assert ack.return_code == 2
    assert ack.session_present == 0
    assert client.wait_closed()


def test_mqtt311_long_client_id_over_23_characters(port: int, raw_factory: RawFactory) -> None:
    """3.1.1 servers may accept longer ids; telemq does (like Mosquitto)."""
    client = raw_factory(port)
    assert client.connect(unique("long-client-id-").ljust(60, "x")).return_code == 0


def test_session_present_rules(port: int, raw_factory: RawFactory) -> None:
    """[MQTT-3.2.2-1..3]: 0 with clean session; 0 for a new persistent session; 1 when one
    exists; a clean-session connect discards it."""
    cid = unique("sp")

    def connect(clean: bool) -> int:
        client = raw_factory(port)
        ack = client.connect(cid, clean=clean)
        assert ack.return_code == 0
        client.disconnect()
        return ack.session_present

    assert connect(clean=True) == 0
    assert connect(clean=False) == 0
    assert connect(clean=False) == 1
    assert connect(clean=False) == 1
    assert connect(clean=True) == 0
    assert connect(clean=False) == 0


def test_session_present_after_subscribe(port: int, raw_factory: RawFactory) -> None:
    cid = unique("sps")
    client = raw_factory(port, connected=True, client_id=cid, clean=False)
    assert client.subscribe([(unique("sp/"), 1)]) == [1]
    client.disconnect()
    again = raw_factory(port)
    assert again.connect(cid, clean=False).session_present == 1


def test_wrong_protocol_name_is_refused(port: int, raw_factory: RawFactory) -> None:
    """A CONNECT with an unknown protocol name is not accepted: the server either answers
    CONNACK 1 or just closes the connection."""
    client = raw_factory(port)
    client.send(connect_packet(unique("pn"), version=MQTT311, protocol_name=b"MQTX"))
    try:
        packet: Packet | None = client.recv_packet()
    except ConnectionClosed:
        packet = None
    if packet is not None:
        assert parse_connack(packet).return_code != 0
    assert client.wait_closed()


def test_username_and_password_accepted_without_auth_config(
    port: int, raw_factory: RawFactory
) -> None:
    client = raw_factory(port)
    ack = client.connect(unique("up"), username="alice", password=b"secret")
    assert ack.return_code == 0
    assert client.is_open()


def test_pingreq_gets_pingresp(port: int, raw_factory: RawFactory) -> None:
    client = raw_factory(port, connected=True)
    for _ in range(3):
        assert client.is_open()


@pytest.mark.parametrize("version", [MQTT31, MQTT311], ids=["mqtt31", "mqtt311"])
def test_paho_connects_and_round_trips(
    port: int, paho_client: Callable[..., PahoClient], version: int
) -> None:
    client = paho_client(port, version=version)
    roundtrip(client, qos=0)
    roundtrip(client, qos=1)
    roundtrip(client, qos=2)


def test_paho_session_present_flag(port: int, paho_factory: Callable[..., PahoClient]) -> None:
    cid = unique("psp")
    first = paho_factory(port, cid, clean=False)
    assert first.connect() is False
    first.subscribe(unique("psp/"), 1)
    first.disconnect()
    second = paho_factory(port, cid, clean=False)
    assert second.connect() is True
