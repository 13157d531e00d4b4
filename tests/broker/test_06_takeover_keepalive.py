"""Client id takeover [MQTT-3.1.4-2] and keep alive x1.5 [MQTT-3.1.2-24]."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from .helpers import (
    MQTT31,
    MQTT311,
    PINGREQ_BYTES,
    PINGRESP,
    PahoClient,
    RawClient,
    Will,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

RawFactory = Callable[..., RawClient]
PahoMaker = Callable[..., PahoClient]
VERSIONS = pytest.mark.parametrize("version", [MQTT31, MQTT311], ids=["mqtt31", "mqtt311"])


@VERSIONS
def test_takeover_closes_old_connection(port: int, raw_factory: RawFactory, version: int) -> None:
    cid = unique("tk")
    topic = unique("tk/")
    old = raw_factory(port, connected=True, client_id=cid, version=version)
    old.subscribe([(topic, 1)])
    new = raw_factory(port)
    assert new.connect(cid, version=version).return_code == 0
    assert old.wait_closed()
    new.subscribe([(topic, 1)])
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"to the new one", qos=1)
    (msg,) = new.collect(1)
    assert msg.payload == b"to the new one"


def test_takeover_of_persistent_session_keeps_it(port: int, raw_factory: RawFactory) -> None:
    cid = unique("tkp")
    topic = unique("tkp/")
    old = raw_factory(port, connected=True, client_id=cid, clean=False)
    old.subscribe([(topic, 1)])
    new = raw_factory(port)
    ack = new.connect(cid, clean=False)
    assert (ack.return_code, ack.session_present) == (0, 1)
    assert old.wait_closed()
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"kept subscription", qos=1)
    (msg,) = new.collect(1)
    assert msg.payload == b"kept subscription"


def test_takeover_with_unacked_message_redelivers_to_new_connection(
    port: int, raw_factory: RawFactory
) -> None:
    cid = unique("tku")
    topic = unique("tku/")
    old = raw_factory(port, connected=True, client_id=cid, clean=False)
    old.subscribe([(topic, 1)])
    pub = raw_factory(port, connected=True)
    pub.publish(topic, b"unacked", qos=1)
    assert old.expect_publish().payload == b"unacked"
    new = raw_factory(port)
    assert new.connect(cid, clean=False).session_present == 1
    assert old.wait_closed()
    again = new.expect_publish()
    assert (again.payload, again.dup) == (b"unacked", True)


def test_repeated_takeovers(port: int, raw_factory: RawFactory) -> None:
    cid = unique("tkr")
    clients = []
    for _ in range(5):
        client = raw_factory(port)
        assert client.connect(cid).return_code == 0
        clients.append(client)
    for old in clients[:-1]:
        assert old.wait_closed()
    assert clients[-1].is_open()


def test_paho_takeover(port: int, paho_factory: PahoMaker) -> None:
    cid = unique("ptk")
    first = paho_factory(port, cid)
    first.connect()
    second = paho_factory(port, cid)
    second.connect()
    first.wait_disconnected()
    topic = unique("ptk/")
    second.subscribe(topic, 1)
    second.publish(topic, b"mine", qos=1)
    assert second.wait_messages(1)[0].payload == b"mine"


def test_silent_connection_closed_after_keepalive(port: int, raw_factory: RawFactory) -> None:
    """Keep alive 1 s: nothing sent -> closed after 1.5 s (we allow up to 10 s)."""
    client = raw_factory(port, connected=True, keepalive=1)
    assert client.wait_closed(timeout=10)


@VERSIONS
def test_keepalive_expiry_publishes_will(port: int, raw_factory: RawFactory, version: int) -> None:
    topic = unique("kw/")
    watch = raw_factory(port, connected=True)
    watch.subscribe([(topic, 1)])
    raw_factory(
        port,
        connected=True,
        client_id=unique("k"),
        keepalive=2,
        version=version,
        will=Will(topic, b"timed out", qos=1),
    )
    (msg,) = watch.collect(1, timeout=15)
    assert msg.payload == b"timed out"


def test_pingreq_keeps_connection_alive(port: int, raw_factory: RawFactory) -> None:
    """PINGREQ every 0.5 s with keep alive 1 s: the connection survives well past 1.5 s."""
    client = raw_factory(port, connected=True, keepalive=1)
    end = time.monotonic() + 4.0
    while time.monotonic() < end:
        client.send(PINGREQ_BYTES)
        assert client.recv_packet(5).type == PINGRESP
        time.sleep(0.5)
    assert client.is_open()


def test_publishing_keeps_connection_alive(port: int, raw_factory: RawFactory) -> None:
    """Any control packet resets the keep-alive timer: QoS 1 PUBLISH every 0.5 s, each
    answered by a PUBACK, for well past 1.5 x 1 s."""
    client = raw_factory(port, connected=True, keepalive=1)
    topic = unique("ka/")
    end = time.monotonic() + 4.0
    while time.monotonic() < end:
        client.publish(topic, b"tick", qos=1)
        time.sleep(0.5)
    assert client.is_open()


def test_keepalive_zero_disables_timeout(port: int, raw_factory: RawFactory) -> None:
    client = raw_factory(port, connected=True, keepalive=0)
    time.sleep(3.0)
    assert client.is_open()
