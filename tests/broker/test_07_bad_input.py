"""Malformed and illegal input closes only the offending connection.

Each case writes raw bytes and expects the server to close that socket (recv returns b'')
within a deadline; afterwards a paho client that has been connected all along must still
publish and receive, and new connections must still be accepted.

This module's broker runs with small limits: ``max_packet_size = 65536`` and
``connect_timeout = 2.0``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from .helpers import (
    DISCONNECT_BYTES,
    MQTT31,
    MQTT311,
    PUBACK,
    PUBCOMP,
    PUBREC,
    PUBREL,
    BrokerProcess,
    PahoClient,
    RawClient,
    Will,
    ack_packet,
    connect_packet,
    encode_str,
    encode_varint,
    fixed,
    publish_packet,
    raw_connected,
    roundtrip,
    subscribe_packet,
    unique,
    unsubscribe_packet,
    write_config,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

MAX_PACKET = 65536
CONNECT_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("bad-input")
    config = write_config(
        workdir / "telemq.toml",
        f"[limits]\nmax_packet_size = {MAX_PACKET}\nconnect_timeout = {CONNECT_TIMEOUT}\n",
    )
    b = BrokerProcess(workdir / "broker", config=config)
    b.start()
    yield b
    b.finalize()


@pytest.fixture(scope="module")
def bystander(broker: BrokerProcess) -> Iterator[PahoClient]:
    """A well-behaved client connected for the whole module."""
    client = PahoClient(broker.port, unique("bystander"))
    client.connect()
    yield client
    client.disconnect()


def assert_others_unaffected(broker: BrokerProcess, bystander: PahoClient) -> None:
    assert broker.running, broker.log_tail()
    assert bystander.disconnects == 0, "the well-behaved client was disconnected"
    roundtrip(bystander, qos=1)
    with raw_connected(broker.port) as fresh:
        assert fresh.is_open()


@dataclass(frozen=True)
class Case:
    id: str
    data: bytes
    connect: int | None = MQTT311  # protocol level of a CONNECT sent first; None: no CONNECT


def _publish_body(topic: bytes, pid: int | None, payload: bytes = b"x") -> bytes:
    return encode_str(topic) + (struct.pack(">H", pid) if pid is not None else b"") + payload


CASES = [
    Case("remaining-length-5-bytes", b"\x30\xff\xff\xff\xff\x01"),
    Case("remaining-length-5-bytes-first-packet", b"\x10\xff\xff\xff\xff\x01", connect=None),
    Case("topic-invalid-utf8", publish_packet(b"a/\xff\xfe", b"x")),
    Case("topic-utf16-surrogate", publish_packet(b"a/\xed\xa0\x80", b"x", qos=1, pid=1)),
    Case("topic-nul", publish_packet(b"a\x00b", b"x")),
    Case("topic-empty", publish_packet(b"", b"x")),
    Case("topic-wildcard-plus", publish_packet("a/+/c", b"x")),
    Case("topic-wildcard-hash", publish_packet("a/#", b"x", qos=1, pid=1)),
    Case("topic-wildcard-plus-mqtt31", publish_packet("+", b"x"), connect=MQTT31),
    Case("qos-3", fixed(0x36, _publish_body(b"a", 1))),
    Case("qos-3-mqtt31", fixed(0x36, _publish_body(b"a", 1)), connect=MQTT31),
    Case("qos1-packet-id-0", publish_packet("a", b"x", qos=1, pid=0)),
    Case("qos2-packet-id-0", publish_packet("a", b"x", qos=2, pid=0)),
    Case("qos1-packet-id-0-mqtt31", publish_packet("a", b"x", qos=1, pid=0), connect=MQTT31),
    Case("subscribe-flags-0", subscribe_packet(1, [("a", 0)], flags=0x00)),
    Case("subscribe-flags-0b1010", subscribe_packet(1, [("a", 0)], flags=0x0A)),
    Case("unsubscribe-flags-0", unsubscribe_packet(1, ["a"], flags=0x00)),
    Case("pubrel-flags-0", ack_packet(PUBREL, 1, flags=0x00)),
    Case("subscribe-qos-3", subscribe_packet(1, [("a", 3)])),
    Case("subscribe-reserved-bits", subscribe_packet(1, [("a", 0x40)])),
    Case("subscribe-no-filters", fixed(0x82, struct.pack(">H", 1))),
    Case("subscribe-packet-id-0", subscribe_packet(0, [("a", 0)])),
    Case("unsubscribe-no-filters", fixed(0xA2, struct.pack(">H", 1))),
    Case("subscribe-filter-invalid-utf8", subscribe_packet(1, [(b"a/\xc3\x28", 0)])),
    # [MQTT-4.7.3-1] and the control characters of 3.1.1 §1.5.3, as Mosquitto 2.0 treats them.
    Case("subscribe-filter-empty", subscribe_packet(1, [("a", 0), ("", 1)])),
    Case("unsubscribe-filter-empty", unsubscribe_packet(1, [""])),
    Case("topic-control-character", publish_packet("a/\x07", b"x", qos=1, pid=1)),
    Case("topic-c1-control-character", publish_packet("a/\x85", b"x")),
    Case("subscribe-filter-control-character", subscribe_packet(1, [("a/\x1b/#", 0)])),
    Case("connect-client-id-control-character", connect_packet("bad\x01id"), connect=None),
    Case(
        "connect-user-name-control-character",
        connect_packet(unique("u"), username="us\x7fer"),
        connect=None,
    ),
    Case(
        "connect-will-topic-control-character",
        connect_packet(unique("w"), will=Will("w/\x10", b"x")),
        connect=None,
    ),
    Case("second-connect", connect_packet(unique("again"))),
    Case("second-connect-mqtt31", connect_packet(unique("a"), version=MQTT31), connect=MQTT31),
    Case("first-packet-pingreq", b"\xc0\x00", connect=None),
    Case("first-packet-publish", publish_packet("a", b"x"), connect=None),
    Case("first-packet-subscribe", subscribe_packet(1, [("a", 0)]), connect=None),
    Case("reserved-type-0", b"\x00\x00"),
    Case("reserved-type-15", b"\xf0\x00"),
    Case("server-only-connack", b"\x20\x02\x00\x00"),
    Case("server-only-suback", b"\x90\x03\x00\x01\x00"),
    Case("topic-length-beyond-packet", fixed(0x30, b"\x00\x50abc")),
    Case("truncated-packet-id", fixed(0x32, encode_str("a") + b"\x01")),
    Case(
        "connect-reserved-flag",
        connect_packet(unique("r"), flags=0x03),
        connect=None,
    ),
    Case(
        "connect-will-qos-3",
        connect_packet(unique("w"), will=Will("w", b"x", qos=3)),
        connect=None,
    ),
    Case(
        "connect-will-qos-without-will-flag",
        connect_packet(unique("w"), flags=0x02 | 0x08),
        connect=None,
    ),
    Case(
        "connect-will-retain-without-will-flag",
        connect_packet(unique("w"), flags=0x02 | 0x20),
        connect=None,
    ),
    Case(
        "connect-password-without-username",
        connect_packet(unique("p"), password=b"secret"),
        connect=None,
    ),
    Case(
        "connect-truncated-payload",
        fixed(0x10, encode_str(b"MQTT") + b"\x04\x02\x00\x3c\x00\x10ab"),
        connect=None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_closes_only_that_connection(
    broker: BrokerProcess, bystander: PahoClient, case: Case
) -> None:
    with RawClient(broker.port) as client:
        if case.connect is not None:
            ack = client.connect(unique("bad"), version=case.connect)
            assert ack.return_code == 0
        client.send(case.data)
        assert client.wait_closed(10), f"connection still open after {case.id}"
    assert_others_unaffected(broker, bystander)


def test_will_flag_zero_connect_variants_are_not_confused_with_valid(
    broker: BrokerProcess,
) -> None:
    """Control for the CONNECT cases above: the same CONNECT with valid flags is accepted."""
    with RawClient(broker.port) as client:
        ack = client.connect(unique("ok"), will=Will("w", b"x", qos=2, retain=True))
        assert ack.return_code == 0
        assert client.is_open()
        client.send(DISCONNECT_BYTES)


@pytest.mark.parametrize(
    ("qos", "answers"),
    [(1, [PUBREC]), (1, [PUBCOMP]), (2, [PUBACK]), (2, [PUBCOMP]), (2, [PUBREC, PUBACK])],
    ids=["pubrec-for-qos1", "pubcomp-for-qos1", "puback-for-qos2", "pubcomp-before-pubrec",
         "puback-after-pubrec"],
)  # fmt: skip
def test_an_acknowledgement_of_the_wrong_kind_closes_the_connection(
    broker: BrokerProcess, bystander: PahoClient, qos: int, answers: list[int]
) -> None:
    topic = unique("kind/")
    with raw_connected(broker.port) as subscriber, raw_connected(broker.port) as publisher:
        assert subscriber.subscribe([(topic, qos)]) == [qos]
        publisher.send(publish_packet(topic, b"x", qos=qos, pid=1))
        if qos == 2:  # released, and so delivered, on PUBREL
            publisher.expect_ack(PUBREC, 1)
            publisher.send(ack_packet(PUBREL, 1))
        delivery = subscriber.expect_publish()
        assert delivery.pid is not None
        for answer in answers:
            subscriber.send(ack_packet(answer, delivery.pid))
        assert subscriber.wait_closed(10), f"connection still open after {answers}"
    assert_others_unaffected(broker, bystander)


def test_pubrel_flags_wrong_in_qos2_flow(broker: BrokerProcess, bystander: PahoClient) -> None:
    with raw_connected(broker.port) as client:
        client.send(publish_packet(unique("f/"), b"x", qos=2, pid=3))
        client.expect_ack(PUBREC, 3)
        client.send(ack_packet(PUBREL, 3, flags=0x00))
        assert client.wait_closed(10)
    assert_others_unaffected(broker, bystander)


def test_packet_over_max_packet_size_closes(broker: BrokerProcess, bystander: PahoClient) -> None:
    """A PUBLISH whose remaining length exceeds max_packet_size is refused: the server closes
    the connection without waiting for the whole body."""
    with raw_connected(broker.port) as client:
        header = bytes([0x30]) + encode_varint(MAX_PACKET * 4)
        client.send(header + encode_str("big") + b"z" * 1000)
        assert client.wait_closed(10)
    with raw_connected(broker.port) as client:
        client.send(publish_packet("big", b"z" * (MAX_PACKET + 10)))
        assert client.wait_closed(10)
    assert_others_unaffected(broker, bystander)


def test_packet_just_under_max_packet_size_is_delivered(
    broker: BrokerProcess, bystander: PahoClient
) -> None:
    topic = unique("big/")
    with raw_connected(broker.port) as sub, raw_connected(broker.port) as pub:
        sub.subscribe([(topic, 1)])
        payload = b"y" * (MAX_PACKET - 200)
        pub.publish(topic, payload, qos=1)
        (msg,) = sub.collect(1)
        assert msg.payload == payload


def test_oversized_message_is_not_delivered_to_subscribers(
    broker: BrokerProcess, bystander: PahoClient
) -> None:
    topic = unique("over/")
    bystander.subscribe(topic, 1)
    with raw_connected(broker.port) as client:
        client.send(publish_packet(topic, b"z" * (MAX_PACKET + 10), qos=1, pid=1))
        assert client.wait_closed(10)
    bystander.publish(topic, b"sentinel", qos=1)
    got = bystander.wait_messages(1, topic=topic)
    assert [m.payload for m in got] == [b"sentinel"]


@pytest.mark.parametrize("partial", [b"", b"\x10", b"\x10\x20\x00\x04MQ"], ids=repr)
def test_no_connect_within_connect_timeout_closes(
    broker: BrokerProcess, bystander: PahoClient, partial: bytes
) -> None:
    with RawClient(broker.port) as client:
        if partial:
            client.send(partial)
        assert client.wait_closed(CONNECT_TIMEOUT + 8)
    assert_others_unaffected(broker, bystander)


def test_many_bad_connections_in_a_row(broker: BrokerProcess, bystander: PahoClient) -> None:
    """Every connected-first case three times over, back to back: nothing leaks or wedges."""
    cases = [c for c in CASES if c.connect == MQTT311] * 3
    for case in cases:
        with RawClient(broker.port) as client:
            assert client.connect(unique("m")).return_code == 0
            client.send(case.data)
            assert client.wait_closed(10), case.id
    assert_others_unaffected(broker, bystander)


def test_invalid_filter_in_mqtt311_is_suback_failure_not_close(
    broker: BrokerProcess,
) -> None:
    with raw_connected(broker.port) as client:
        assert client.subscribe([("a/#/b", 1)]) == [0x80]
        assert client.is_open()
