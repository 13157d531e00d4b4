"""Will messages: published when a connection ends abnormally, never after DISCONNECT."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from .helpers import (
    DISCONNECT_BYTES,
    MQTT31,
    MQTT311,
    BrokerProcess,
    PahoClient,
    RawClient,
    Will,
    collect_until,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

RawFactory = Callable[..., RawClient]
PahoMaker = Callable[..., PahoClient]
VERSIONS = pytest.mark.parametrize("version", [MQTT31, MQTT311], ids=["mqtt31", "mqtt311"])


def watcher(raw_factory: RawFactory, port: int, topic_filter: str) -> RawClient:
    client = raw_factory(port, connected=True)
    assert client.subscribe([(topic_filter, 2)]) == [2]
    return client


@VERSIONS
@pytest.mark.parametrize("will_qos", [0, 1, 2])
def test_will_published_when_socket_closes_without_disconnect(
    port: int, raw_factory: RawFactory, version: int, will_qos: int
) -> None:
    topic = unique("will/")
    watch = watcher(raw_factory, port, topic)
    victim = raw_factory(
        port,
        connected=True,
        client_id=unique("v"),
        version=version,
        will=Will(topic, b"gone", qos=will_qos),
    )
    victim.close()
    (msg,) = watch.collect(1)
    assert (msg.topic, msg.payload, msg.qos, msg.retain) == (topic, b"gone", will_qos, False)


@VERSIONS
def test_no_will_after_disconnect(port: int, raw_factory: RawFactory, version: int) -> None:
    topic = unique("nowill/")
    watch = watcher(raw_factory, port, topic)
    client = raw_factory(
        port, connected=True, client_id=unique("d"), version=version, will=Will(topic, b"w", 1)
    )
    client.send(DISCONNECT_BYTES)
    # The server closes the connection after DISCONNECT; the will is decided by then.
    assert client.wait_closed()
    other = raw_factory(port, connected=True)
    other.publish(topic, b"sentinel", qos=1)
    got = collect_until(watch, b"sentinel")
    assert [m.payload for m in got] == [b"sentinel"]


def test_retained_will_is_stored(port: int, raw_factory: RawFactory) -> None:
    topic = unique("rwill/")
    victim = raw_factory(port, connected=True, will=Will(topic, b"offline", qos=1, retain=True))
    watch = watcher(raw_factory, port, topic)
    victim.close()
    (live,) = watch.collect(1)
    assert (live.payload, live.retain) == (b"offline", False)
    late = raw_factory(port, connected=True)
    late.subscribe([(topic, 1)])
    (stored,) = late.collect(1)
    assert (stored.payload, stored.retain, stored.qos) == (b"offline", True, 1)


def test_will_published_on_protocol_error(port: int, raw_factory: RawFactory) -> None:
    """A protocol violation closes the connection: that is an abnormal end."""
    topic = unique("pwill/")
    watch = watcher(raw_factory, port, topic)
    victim = raw_factory(port, connected=True, will=Will(topic, b"broken", qos=1))
    victim.send(b"\x36\x00")  # PUBLISH with QoS 3: malformed
    assert victim.wait_closed()
    (msg,) = watch.collect(1)
    assert msg.payload == b"broken"


def test_will_published_on_keepalive_expiry(port: int, raw_factory: RawFactory) -> None:
    topic = unique("kwill/")
    watch = watcher(raw_factory, port, topic)
    victim = raw_factory(port, connected=True, keepalive=1, will=Will(topic, b"silent", 1))
    assert victim.wait_closed(timeout=10)
    (msg,) = watch.collect(1)
    assert msg.payload == b"silent"


def test_will_with_empty_payload(port: int, raw_factory: RawFactory) -> None:
    topic = unique("ewill/")
    watch = watcher(raw_factory, port, topic)
    victim = raw_factory(port, connected=True, will=Will(topic, b"", qos=1))
    victim.close()
    (msg,) = watch.collect(1)
    assert (msg.topic, msg.payload) == (topic, b"")


@VERSIONS
def test_paho_will_on_abnormal_end(
    port: int, paho_client: PahoMaker, paho_factory: PahoMaker, version: int
) -> None:
    topic = unique("pw/")
    watch = paho_client(port)
    watch.subscribe(topic, 1)
    victim = paho_factory(port, version=version, will=Will(topic, b"paho gone", qos=1))
    victim.connect()
    victim.kill_socket()
    (msg,) = watch.wait_messages(1)
    assert (msg.payload, msg.qos) == (b"paho gone", 1)


@VERSIONS
def test_paho_no_will_on_disconnect(
    port: int, paho_client: PahoMaker, paho_factory: PahoMaker, version: int
) -> None:
    topic = unique("pnw/")
    watch = paho_client(port)
    watch.subscribe(topic, 1)
    victim = paho_factory(port, version=version, will=Will(topic, b"no", qos=1))
    victim.connect()
    victim.disconnect()
    other = paho_client(port)
    other.publish(topic, b"sentinel", qos=1)
    got = watch.wait_messages(1)
    assert [m.payload for m in got] == [b"sentinel"]


@VERSIONS
def test_will_published_when_the_session_is_taken_over(
    port: int, raw_factory: RawFactory, version: int
) -> None:
    """A second connection with the same client id closes the first: an abnormal end of the
    first, whose will is published (as Mosquitto does)."""
    topic = unique("twill/")
    client_id = unique("tk")
    watch = watcher(raw_factory, port, topic)
    first = raw_factory(
        port, connected=True, client_id=client_id, version=version, will=Will(topic, b"taken", 1)
    )
    second = raw_factory(port, connected=True, client_id=client_id, version=version)
    assert first.wait_closed()
    (msg,) = watch.collect(1)
    assert (msg.topic, msg.payload) == (topic, b"taken")
    assert second.is_open()


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_no_will_when_the_broker_shuts_down(
    broker_factory: Callable[..., BrokerProcess], raw_factory: RawFactory, signal_name: str
) -> None:
    """Stopping the broker ends its connections without publishing their wills: the clients
    did nothing wrong. Checked after a restart: no retained will was stored, and a retained
    sentinel was."""
    broker = broker_factory()
    topic = unique("swill/")
    raw_factory(broker.port, connected=True, will=Will(f"{topic}/will", b"w", 1, retain=True))
    publisher = raw_factory(broker.port, connected=True)
    publisher.publish(f"{topic}/sentinel", b"s", qos=1, retain=True)
    assert broker.stop(getattr(signal, signal_name)) == 0
    broker.start()
    late = raw_factory(broker.port, connected=True)
    late.subscribe([(f"{topic}/#", 1)])
    got = collect_until(late, b"s")
    assert [(m.topic, m.payload) for m in got] == [(f"{topic}/sentinel", b"s")]
