"""telemq as a Sparkplug Aware MQTT Server (Sparkplug 3.0 §10.1.4; docs/sparkplug.md), with
a real edge node and real host applications (pysparkplug, in `.venv-sparkplug`:
testsupport/sparkplug_peers.py) and paho-mqtt 2 observers.

One broker for the module (anonymous clients, an administrator for the admin API, an HTTP
listener, `$SYS` every 0.3 s). Each test names its own Sparkplug group, so the retained
certificates of one never meet another's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from telemq import Broker, BrokerConfig
from telemq.broker import ConfigError, ListenerConfig
from telemq.broker.settings.config import config_from_mapping
from telemq.sparkplug import MessageType, decode_payload
from telemq.sparkplug.schema import PAYLOAD
from testsupport.metrics import samples, value
from testsupport.paho import MQTT5, MQTT311, PahoClient, Received, sys_value
from testsupport.process import BrokerProcess, free_port, unique, users_and_acl
from testsupport.sparkplug_peers import SparkplugPeer, start_peer

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

CERTIFICATES = "$sparkplug/certificates/"
ADMIN = ("root", "root-pw")
INVALID = "$SYS/broker/sparkplug/invalid"
DENIED = "$SYS/broker/publish/messages/denied"


class Served:
    """The module's broker and its HTTP port."""

    def __init__(self, broker: BrokerProcess, http_port: int) -> None:
        self.broker = broker
        self.http_port = http_port

    @property
    def port(self) -> int:
        return self.broker.port

    def overview(self) -> dict[str, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.http_port}/api/v1/overview")
        token = base64.b64encode(":".join(ADMIN).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            body: dict[str, Any] = json.loads(response.read())
            return body


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("sparkplug")
    http_port = free_port()
    config = workdir / "telemq.toml"
    config.write_text(
        "allow_anonymous = true\n"
        + users_and_acl(dict([ADMIN]), [], admins={ADMIN[0]})
        + "\n[sys]\ninterval = 0.3\n"
        + f'[[http]]\nhost = "127.0.0.1"\nport = {http_port}\n',
        encoding="utf-8",
    )
    broker = BrokerProcess(workdir / "broker", config=config).start()
    yield Served(broker, http_port)
    broker.finalize()


@pytest.fixture
def peers() -> Iterator[list[SparkplugPeer]]:
    """The peers a test starts: closed (or killed) at its end."""
    started: list[SparkplugPeer] = []
    yield started
    for peer in started:
        peer.close()


@pytest.fixture
def observers() -> Iterator[list[PahoClient]]:
    started: list[PahoClient] = []
    yield started
    for client in started:
        client.close()


def observer(
    served: Served, observers: list[PahoClient], *topics: str, version: int = MQTT311
) -> PahoClient:
    """A paho-mqtt 2 client subscribed to `topics` at QoS 1."""
    client = PahoClient(served.port, version=version)
    observers.append(client)
    client.connect()
    client.subscribe([(topic, 1) for topic in topics])
    return client


def edge_node(
    served: Served, peers: list[SparkplugPeer], group: str, node: str, *devices: str
) -> SparkplugPeer:
    args = ["--port", str(served.port), "--group", group, "--node", node]
    for device in devices:
        args += ["--device", device]
    peer = start_peer("edge_node.py", args, "ready")
    peers.append(peer)
    return peer


def host_application(
    served: Served, peers: list[SparkplugPeer], host_id: str, *options: str
) -> SparkplugPeer:
    args = ["--port", str(served.port), "--host-id", host_id, *options]
    peer = start_peer("host_application.py", args, "online")
    peers.append(peer)
    return peer


def certificates(served: Served, observers: list[PahoClient], group: str, count: int) -> list:
    """The retained certificates of `group` a new subscriber gets (at least `count`)."""
    reader = observer(served, observers, f"{CERTIFICATES}spBv1.0/{group}/#")
    return reader.wait_messages(count)


def test_births_are_kept_and_a_late_host_reads_them(
    served: Served, peers: list[SparkplugPeer], observers: list[PahoClient]
) -> None:
    """NBIRTH and DBIRTH pass through as published (RETAIN 0) and are kept, byte for byte,
    as retained messages on `$sparkplug/certificates/...`; data flows to the host; a host
    that connects afterwards reads the births there."""
    group = unique("G")
    host = host_application(served, peers, unique("host"))
    raw = observer(served, observers, f"spBv1.0/{group}/#")
    edge = edge_node(served, peers, group, "E1", "D1")
    nbirth_topic = f"spBv1.0/{group}/NBIRTH/E1"
    dbirth_topic = f"spBv1.0/{group}/DBIRTH/E1/D1"
    nbirth = host.wait_message(nbirth_topic)
    assert nbirth["retain"] is False and nbirth["metrics"]["counter"] == 0
    assert host.wait_message(dbirth_topic)["metrics"] == {"reading": 0}
    edge.send("ndata 5")
    edge.send("ddata D1 7")
    assert host.wait_message(f"spBv1.0/{group}/NDATA/E1")["metrics"] == {"counter": 5}
    assert host.wait_message(f"spBv1.0/{group}/DDATA/E1/D1")["metrics"] == {"reading": 7}
    births = {m.topic: m.payload for m in raw.wait_messages(2) if "BIRTH" in m.topic}

    late = host_application(served, peers, unique("late"), "--certificates")
    for topic in (nbirth_topic, dbirth_topic):
        kept = late.wait_message(CERTIFICATES + topic)
        assert kept["retain"] is True
        assert kept["type"] == topic.split("/")[2]
    assert (
        late.messages(CERTIFICATES + nbirth_topic)[0]["metrics"]["bdSeq"]
        == (nbirth["metrics"]["bdSeq"])
    )
    got = certificates(served, observers, group, 2)
    assert {m.topic: m.payload for m in got} == {CERTIFICATES + t: births[t] for t in births}
    assert all(m.retain for m in got)


def test_a_rebirth_on_ncmd_replaces_the_certificate(
    served: Served, peers: list[SparkplugPeer], observers: list[PahoClient]
) -> None:
    """A host's NCMD `Node Control/Rebirth` reaches the edge node, whose new NBIRTH (with
    the counter it has now) becomes the certificate: always the most recent birth."""
    group = unique("G")
    host = host_application(served, peers, unique("host"))
    edge = edge_node(served, peers, group, "E1")
    nbirth_topic = f"spBv1.0/{group}/NBIRTH/E1"
    host.wait_message(nbirth_topic)
    edge.send("ndata 42")
    host.wait_message(f"spBv1.0/{group}/NDATA/E1")
    host.send(f"rebirth {group} E1")
    edge.wait_for(lambda e: e.get("event") == "rebirth", "the rebirth")
    assert host.wait_message(nbirth_topic, after=1)["metrics"]["counter"] == 42
    (kept,) = certificates(served, observers, group, 1)
    assert kept.topic == CERTIFICATES + nbirth_topic and kept.retain
    metrics = {m.name: m.value for m in decode_payload(kept.payload, MessageType.NBIRTH).metrics}
    assert metrics["counter"] == 42


def test_a_dropped_edge_node_dies_by_its_will(
    served: Served, peers: list[SparkplugPeer], observers: list[PahoClient]
) -> None:
    """An edge node whose connection drops (killed: no DISCONNECT) dies by its NDEATH will,
    with the bdSeq of its NBIRTH and, set by the broker, the time of its death; the
    certificates stay (they are the most recent births)."""
    group = unique("G")
    host = host_application(served, peers, unique("host"))
    raw = observer(served, observers, f"spBv1.0/{group}/NDEATH/#")
    edge = edge_node(served, peers, group, "E1", "D1")
    nbirth = host.wait_message(f"spBv1.0/{group}/NBIRTH/E1")
    host.wait_message(f"spBv1.0/{group}/DBIRTH/E1/D1")  # both births are in
    before_ms = time.time_ns() // 1_000_000
    edge.kill()
    ndeath = host.wait_message(f"spBv1.0/{group}/NDEATH/E1")
    assert ndeath["metrics"]["bdSeq"] == nbirth["metrics"]["bdSeq"]
    (will,) = raw.wait_messages(1)
    decoded = decode_payload(will.payload, MessageType.NDEATH)
    assert decoded.timestamp is not None and decoded.timestamp >= before_ms
    assert [m.name for m in decoded.metrics] == ["bdSeq"]
    assert len(certificates(served, observers, group, 2)) == 2


@pytest.mark.parametrize("mqtt", ["3.1.1", "5"])
def test_state_of_a_host_application(
    served: Served, peers: list[SparkplugPeer], observers: list[PahoClient], mqtt: str
) -> None:
    """A host application's STATE (3.1.1: Clean Session; 5.0: Clean Start, Session Expiry
    0): its birth retained for whoever subscribes later, its will (online false, the
    timestamp of its CONNECT) published and retained when its connection drops."""
    host_id = unique("host")
    state = f"spBv1.0/STATE/{host_id}"
    host = host_application(served, peers, host_id, "--mqtt", mqtt)
    online = host.wait_for(lambda e: e.get("event") == "online", "online")
    version = MQTT5 if mqtt == "5" else MQTT311
    (birth,) = observer(served, observers, state, version=version).wait_messages(1)
    assert birth.retain and birth.qos == 1
    assert json.loads(birth.payload) == {"online": True, "timestamp": online["timestamp"]}
    watcher = observers[-1]
    host.kill()
    death = watcher.wait_messages(2)[1]
    assert json.loads(death.payload) == {"online": False, "timestamp": online["timestamp"]}
    (kept,) = observer(served, observers, state, version=version).wait_messages(1)
    assert kept.retain and json.loads(kept.payload)["online"] is False


def test_clients_cannot_publish_under_sparkplug(
    served: Served, peers: list[SparkplugPeer], observers: list[PahoClient]
) -> None:
    """`$sparkplug/` is the broker's: a client's PUBLISH there (3.1.1 or 5.0, retained or
    not) is dropped and counted as denied; the certificate stays the edge node's."""
    group = unique("G")
    edge_node(served, peers, group, "E1")
    topic = f"{CERTIFICATES}spBv1.0/{group}/NBIRTH/E1"
    watcher = observer(served, observers, topic)
    (original,) = watcher.wait_messages(1)
    denied_before = int(sys_value(served.port, DENIED) or 0)
    for version in (MQTT311, MQTT5):
        forger = PahoClient(served.port, version=version)
        observers.append(forger)
        forger.connect()
        forger.publish(topic, b"forged", qos=1, retain=True)
    assert sys_value(served.port, DENIED, 5.0, until=lambda v: int(v) >= denied_before + 2)
    (kept,) = observer(served, observers, topic).wait_messages(1)
    assert kept.payload == original.payload
    assert watcher.received(topic) == [original]


def test_what_is_not_sparkplug_is_routed_counted_and_not_kept(
    served: Served, observers: list[PahoClient]
) -> None:
    """Under spBv1.0/: a payload that is not Sparkplug B, topics that break the namespace,
    a BIRTH giving one alias twice, a STATE that is not its JSON: each is delivered as any
    MQTT message, none becomes a certificate, each is counted alike in `$SYS`, /metrics and
    the admin API."""
    group = unique("BAD")
    duplicate = PAYLOAD(timestamp=1, seq=0)
    for name in ("a", "b"):
        metric = duplicate.metrics.add(name=name, alias=7, datatype=3)
        metric.int_value = 1
    good = PAYLOAD(timestamp=1, seq=0)
    good.metrics.add(name="bdSeq", datatype=4).long_value = 0
    bad: list[tuple[str, bytes]] = [
        (f"spBv1.0/{group}/NBIRTH/E1", b"\xff not protobuf"),
        (f"spBv1.0/{group}/NBIRTH", good.SerializeToString()),
        (f"spBv1.0/{group}/NBIRTHDAY/E1", good.SerializeToString()),
        (f"spBv1.0/{group}/DBIRTH/E1", good.SerializeToString()),
        (f"spBv1.0/{group}/NBIRTH/E2", duplicate.SerializeToString()),
        (f"spBv1.0/{group}/NBIRTH/E3", b""),
        (f"spBv1.0/STATE/{group}", b"online"),
    ]
    before = served.overview()["sparkplug_invalid"]
    watcher = observer(served, observers, f"spBv1.0/{group}/#", f"spBv1.0/STATE/{group}")
    publisher = observer(served, observers, unique("nothing/"))
    for topic, payload in bad:
        publisher.publish(topic, payload, qos=1)
    marker = f"spBv1.0/{group}/NBIRTH/E9"
    publisher.publish(marker, good.SerializeToString(), qos=1)
    got = watcher.wait_messages(len(bad) + 1)
    assert [(m.topic, m.payload) for m in got] == [*bad, (marker, good.SerializeToString())]
    (only,) = certificates(served, observers, group, 1)
    assert only == Received(CERTIFICATES + marker, good.SerializeToString(), 1, True)
    expected = before + len(bad)
    assert served.overview()["sparkplug_invalid"] == expected
    assert int(sys_value(served.port, INVALID, 5.0, until=lambda v: int(v) >= expected) or 0) == (
        expected
    )
    assert value(samples(served.http_port, ADMIN), "telemq_sparkplug_invalid_total") == expected
    assert served.broker.running


def test_certificates_survive_a_restart_and_awareness_can_be_switched_off(
    tmp_path: Path,
) -> None:
    """In process, on a SQLite store: a certificate is kept across a restart (it is stored
    with the retained messages). `[sparkplug] aware = false`: births are routed, nothing is
    kept under `$sparkplug/`, nothing is counted. A value that is not a boolean is refused
    naming the key."""
    with pytest.raises(ConfigError, match=r"sparkplug\.aware: expected true or false"):
        config_from_mapping({"sparkplug": {"aware": "yes"}})
    birth = PAYLOAD(timestamp=1, seq=0)
    birth.metrics.add(name="bdSeq", datatype=4).long_value = 0

    def config(aware: bool) -> BrokerConfig:
        config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
        config.sys.interval = 0
        config.sparkplug.aware = aware
        config.store.data_dir = str(tmp_path / f"aware-{aware}")
        config.store.sync = "off"
        return config

    async def run(aware: bool) -> tuple[list[str], int]:
        async with Broker(config(aware), listeners=[]) as broker:
            births = broker.subscribe("spBv1.0/#", qos=0)
            broker.publish("spBv1.0/G/NBIRTH/E1", birth.SerializeToString())
            broker.publish("spBv1.0/G/NBIRTH", b"not sparkplug")
            got = [(await asyncio.wait_for(births.get(), 5)).topic for _ in range(2)]
            assert got == ["spBv1.0/G/NBIRTH/E1", "spBv1.0/G/NBIRTH"]
            kept = broker.retained.matching("", CERTIFICATES + "#")
            return [m.topic for m in kept], broker.stats.sparkplug_invalid

    async def restored() -> list[tuple[str, bytes, bool]]:
        async with Broker(config(True), listeners=[]) as broker:
            kept = broker.retained.matching("", CERTIFICATES + "#")
            return [(m.topic, m.payload, m.local_only) for m in kept]

    assert asyncio.run(run(True)) == ([CERTIFICATES + "spBv1.0/G/NBIRTH/E1"], 1)
    assert asyncio.run(restored()) == [
        (CERTIFICATES + "spBv1.0/G/NBIRTH/E1", birth.SerializeToString(), True)
    ]
    assert asyncio.run(run(False)) == ([], 0)
