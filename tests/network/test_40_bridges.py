"""Bridges between telemq and Debian's `mosquitto`, both directions (docs/network.md §8).

telemq's `[[bridges]]` dial a real `mosquitto` (3.1, 3.1.1 and 5.0): topics renamed by the
rules' prefixes, QoS 1 and 2 both ways, `both` rules without echo, retained messages, a
queue that waits for the remote broker across a cut and a SIGKILL, `$SYS` and Mosquitto's
notifications. Then Mosquitto's own bridge into telemq (private level 0x84): its
subscriptions get No Local, so nothing it sends comes back to it.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mq.helpers import assert_ok, connected
from testsupport.metrics import samples, value
from testsupport.mosquitto import MosquittoProcess
from testsupport.paho import MQTT5, MQTT31, MQTT311, PahoClient, sys_value
from testsupport.process import (
    HOST,
    BrokerProcess,
    connack_code,
    free_port,
    users_and_acl,
    wait_until,
)
from testsupport.relay import Relay

PROTOCOLS = {MQTT31: "3.1", MQTT311: "3.1.1", MQTT5: "5"}
ADMIN = ("admin", "admin-pw")  # an administrator, for the admin API
BRIDGE_SESSION = "$bridge/cloud"  # the bridge's session and queue at telemq


class Bridged:
    """A telemq broker named `edge` with one bridge, `cloud`, to a mosquitto."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.mosquitto = MosquittoProcess(tmp_path / "mosquitto")
        self.relay: Relay | None = None
        self.telemq: BrokerProcess | None = None
        self.clients: list[PahoClient] = []

    def start(
        self,
        topics: list[str],
        protocol: str = "3.1.1",
        extra: str = "",
        relayed: bool = False,
        wait: bool = True,
        before: str = "",
    ) -> Bridged:
        """`extra`: more keys of the bridge's table; `before`: tables that come before it
        (users, an HTTP listener), kept when a test takes the bridge out."""
        self.mosquitto.start()
        port = self.mosquitto.port
        if relayed:
            self.relay = Relay(port)
            port = self.relay.port
        rules = ", ".join(f'"{rule}"' for rule in topics)
        self.telemq = BrokerProcess(
            self.tmp_path / "telemq",
            config_text=(
                'name = "edge"\nallow_anonymous = true\n[sys]\ninterval = 0.2\n'
                f'{before}\n[[bridges]]\nname = "cloud"\nhost = "{HOST}"\nport = {port}\n'
                f'protocol = "{protocol}"\nreconnect_min = 0.1\nreconnect_max = 1.0\n'
                f"topics = [{rules}]\n{extra}"
            ),
        ).start()
        if wait:
            assert self.wait_state("connected"), self.telemq.log_tail()
        return self

    def wait_state(self, state: str) -> bool:
        assert self.telemq is not None
        port = self.telemq.port
        topic = "$SYS/broker/bridges/cloud/state"
        return wait_until(lambda: sys_value(port, topic, 1.0) == state, 20.0, 0.2)

    def local(self, version: int = MQTT311, **options: object) -> PahoClient:
        assert self.telemq is not None
        return self._client(self.telemq.port, version, **options)

    def remote(self, version: int = MQTT311, **options: object) -> PahoClient:
        return self._client(self.mosquitto.port, version, **options)

    def _client(self, port: int, version: int, **options: object) -> PahoClient:
        client = PahoClient(port, version=version, **options)  # type: ignore[arg-type]
        client.connect()
        self.clients.append(client)
        return client

    def finalize(self) -> None:
        for client in self.clients:
            client.close()
        try:
            if self.telemq is not None:
                self.telemq.finalize()
        finally:
            self.mosquitto.finalize()
            if self.relay is not None:
                self.relay.close()


@pytest.fixture
def bridged(tmp_path: Path) -> Iterator[Bridged]:
    setup = Bridged(tmp_path)
    try:
        yield setup
    finally:
        setup.finalize()


def payloads(client: PahoClient, topic: str | None = None) -> list[bytes]:
    return [m.payload for m in client.received(topic)]


SENTINELS = "end/"  # the last level of a sentinel's topic starts with this


def chat(client: PahoClient) -> list[bytes]:
    """The payloads `client` received, sentinels left out."""
    return [m.payload for m in client.received() if SENTINELS not in m.topic]


def sync_both_ways(
    here: PahoClient, there: PahoClient, local: PahoClient, remote: PahoClient, base: str = "chat"
) -> None:
    """Wait until no echo can still be on its way, through a sentinel each way under
    `base` (a `both` rule), at QoS 2 like what it follows.

    An echo of what `local` got from the remote would go back out over the bridge when
    telemq routed it, before a sentinel `here` publishes now, so `remote` sees that echo
    before the sentinel; the same the other way round with `there`, whose sentinel
    mosquitto forwards after any echo it owed. (telemq's bridge session is one FIFO queue,
    and mosquitto forwards a connection's messages in the order it routed them.)"""
    out, back = f"{base}/{SENTINELS}out", f"{base}/{SENTINELS}in"
    here.publish(out, "sentinel", qos=2)
    there.publish(back, "sentinel", qos=2)
    for client in (local, remote):
        client.wait_messages(1, topic=out)
        client.wait_messages(1, topic=back)


@pytest.mark.parametrize("version", [MQTT31, MQTT311, MQTT5])
def test_out_and_in_with_prefixes(bridged: Bridged, version: int) -> None:
    bridged.start(["sensors/# out 2 local/ remote/", "cmd/# in 2 edge/ cloud/"], PROTOCOLS[version])
    remote = bridged.remote()
    remote.subscribe("remote/sensors/#", qos=2)
    local = bridged.local()
    local.subscribe("edge/cmd/#", qos=2)
    publisher = bridged.local()
    for qos in (0, 1, 2):
        publisher.publish(f"local/sensors/t{qos}", f"out {qos}", qos=qos)
    got = remote.wait_messages(3)
    assert sorted((m.topic, m.payload, m.qos) for m in got) == [
        ("remote/sensors/t0", b"out 0", 0),
        ("remote/sensors/t1", b"out 1", 1),
        ("remote/sensors/t2", b"out 2", 2),
    ]
    remote_publisher = bridged.remote()
    for qos in (0, 1, 2):
        remote_publisher.publish(f"cloud/cmd/c{qos}", f"in {qos}", qos=qos)
    got = local.wait_messages(3)
    assert sorted((m.topic, m.payload, m.qos) for m in got) == [
        ("edge/cmd/c0", b"in 0", 0),
        ("edge/cmd/c1", b"in 1", 1),
        ("edge/cmd/c2", b"in 2", 2),
    ]
    # Nothing outside the rules crosses, under any name: a `#` watcher on each side sees
    # everything published there. Each side's client publishes its forbidden message and
    # then a sentinel on a topic its rule allows, both at QoS 1: had the forbidden one been
    # taken by the bridge, it would have crossed first, on the same bridge connection
    # (telemq's bridge session is one FIFO queue; mosquitto forwards a connection's
    # messages in the order they came), so once a sentinel has crossed, nothing forbidden
    # is on its way behind it.
    remote_all = bridged.remote()
    remote_all.subscribe("#", qos=1)
    local_all = bridged.local()
    local_all.subscribe("#", qos=1)
    publisher.publish("other/x", "no", qos=1)
    publisher.publish("local/sensors/end", "sentinel out", qos=1)
    remote_publisher.publish("cloud/other", "no", qos=1)
    remote_publisher.publish("cloud/cmd/end", "sentinel in", qos=1)
    remote_all.wait_messages(1, topic="remote/sensors/end")  # crossed out
    remote_all.wait_messages(1, topic="cloud/cmd/end")  # published there
    local_all.wait_messages(1, topic="edge/cmd/end")  # crossed in
    local_all.wait_messages(1, topic="local/sensors/end")  # published here
    remote.wait_messages(1, topic="remote/sensors/end")  # each watcher its own sentinel
    local.wait_messages(1, topic="edge/cmd/end")
    assert sorted(m.topic for m in remote_all.received()) == [
        "cloud/cmd/end",
        "cloud/other",
        "remote/sensors/end",
    ]
    assert sorted(m.topic for m in local_all.received()) == [
        "edge/cmd/end",
        "local/sensors/end",
        "other/x",
    ]
    assert len(remote.received()) == 3 + 1 and len(local.received()) == 3 + 1  # + sentinel


@pytest.mark.parametrize("version", [MQTT311, MQTT5])
def test_both_does_not_echo(bridged: Bridged, version: int) -> None:
    """Private level 0x84 (3.1.1) or No Local (5.0): one copy each side, each way."""
    bridged.start(["chat/# both 2"], PROTOCOLS[version])
    local = bridged.local()
    local.subscribe("chat/#", qos=2)
    remote = bridged.remote()
    remote.subscribe("chat/#", qos=2)
    here, there = bridged.local(), bridged.remote()
    here.publish("chat/here", "from telemq", qos=2)
    there.publish("chat/there", "from mosquitto", qos=2)
    local.wait_messages(2)
    remote.wait_messages(2)
    sync_both_ways(here, there, local, remote)
    assert sorted(chat(local)) == [b"from mosquitto", b"from telemq"]
    assert sorted(chat(remote)) == [b"from mosquitto", b"from telemq"]


def test_without_private_mode_an_echo_comes_back_once(bridged: Bridged) -> None:
    """The documented 3.1.1 behaviour without `try_private`: the remote sends a `both`
    copy back, local subscribers see it twice, and it never goes out again (no loop)."""
    bridged.start(["chat/# both 1"], extra="try_private = false\n")
    local = bridged.local()
    local.subscribe("chat/#", qos=1)
    remote = bridged.remote()
    remote.subscribe("chat/#", qos=1)
    here = bridged.local()
    here.publish("chat/here", "from telemq", qos=1)
    local.wait_messages(2)
    # A sentinel from the same publisher, now that the echo is back: had telemq sent the
    # echo out again, that copy would be ahead of the sentinel on the bridge (so at
    # `remote` before it), and mosquitto's echo of it ahead of the sentinel's own echo
    # (so at `local` before the sentinel's second copy).
    sentinel = f"chat/{SENTINELS}x"
    here.publish(sentinel, "sentinel", qos=1)
    remote.wait_messages(1, topic=sentinel)
    local.wait_messages(2, topic=sentinel)  # its own copy and its echo
    assert chat(local) == [b"from telemq", b"from telemq"]
    assert chat(remote) == [b"from telemq"]


def test_an_mq_publish_with_pubopt_local_stays_here(bridged: Bridged) -> None:
    """PubOpt Local keeps a publication at its broker: off the links, and off the bridges."""
    bridged.start(["mq/# out 1"])
    assert bridged.telemq is not None
    remote = bridged.remote()
    remote.subscribe("mq/#", qos=1)
    local = bridged.local()
    local.subscribe("mq/#", qos=1)
    publisher = connected(bridged.telemq.port)
    try:
        assert_ok(
            publisher.command(
                {"Command": "Publish", "Topic": "mq/local", "PubOpt": "Local"}, body=b"here"
            )
        )
        assert_ok(publisher.command({"Command": "Publish", "Topic": "mq/all"}, body=b"all"))
    finally:
        publisher.close()
    local.wait_messages(2)
    # mq/all is the sentinel: the same MQ publisher sent mq/local first, so had that gone
    # over the bridge it would have reached `remote` before mq/all.
    remote.wait_messages(1, topic="mq/all")
    assert [m.topic for m in remote.received()] == ["mq/all"]


def test_retained_messages_cross(bridged: Bridged) -> None:
    bridged.start(["state/# out 1", "config/# in 1"])
    # Watchers that were there before: once each has its copy, the broker it is connected
    # to has received (and kept) the retained message.
    remote_watcher = bridged.remote()
    remote_watcher.subscribe("state/#", qos=1)
    local_watcher = bridged.local()
    local_watcher.subscribe("config/#", qos=1)
    bridged.local().publish("state/door", "open", qos=1, retain=True)
    bridged.remote().publish("config/rate", "10", qos=1, retain=True)
    remote_watcher.wait_messages(1, topic="state/door")
    local_watcher.wait_messages(1, topic="config/rate")
    remote = bridged.remote()
    remote.subscribe("state/#", qos=1)
    (door,) = remote.wait_messages(1)
    assert (door.topic, door.payload, door.retain) == ("state/door", b"open", True)
    local = bridged.local()
    local.subscribe("config/#", qos=1)
    (rate,) = local.wait_messages(1)
    assert (rate.topic, rate.payload, rate.retain) == ("config/rate", b"10", True)


def test_outgoing_retain_false_clears_retain(bridged: Bridged) -> None:
    bridged.start(["state/# out 1"], extra="outgoing_retain = false\n")
    remote = bridged.remote(version=MQTT5)
    from paho.mqtt.subscribeoptions import SubscribeOptions

    remote.subscribe("state/#", options=SubscribeOptions(qos=1, retainAsPublished=True))
    bridged.local().publish("state/door", "open", qos=1, retain=True)
    (door,) = remote.wait_messages(1)
    assert not door.retain
    late = bridged.remote()
    late.subscribe("state/#", qos=1)
    # Mosquitto sends what it retained right after the SUBACK, before anything published
    # later: a sentinel published now comes after it.
    sentinel = f"state/{SENTINELS}x"
    bridged.remote().publish(sentinel, "sentinel", qos=1)
    late.wait_messages(1, topic=sentinel)
    assert [m for m in late.received() if m.topic != sentinel] == []  # nothing retained


def test_the_queue_waits_for_the_remote_across_a_cut_and_a_sigkill(bridged: Bridged) -> None:
    """QoS 1 copies queue in the bridge's persistent session while the remote is out of
    reach, survive SIGKILL of telemq, and all arrive, in order, once it is back."""
    bridged.start(["jobs/# out 1"], relayed=True)
    relay = bridged.relay
    telemq = bridged.telemq
    assert relay is not None and telemq is not None
    remote = bridged.remote(client_id="worker", clean=False)
    remote.subscribe("jobs/#", qos=1)
    relay.blocked = True
    relay.cut()
    assert bridged.wait_state("down")
    publisher = bridged.local()
    for number in range(10):
        publisher.publish("jobs/a", f"{number}", qos=1)
    telemq.kill()
    telemq.start()
    publisher = bridged.local()
    for number in range(10, 20):
        publisher.publish("jobs/a", f"{number}", qos=1)
    assert remote.received() == []
    relay.blocked = False
    got = remote.wait_messages(20, timeout=30.0)
    assert [m.payload for m in got] == [f"{n}".encode() for n in range(20)]


def test_sys_and_notifications(bridged: Bridged) -> None:
    bridged.start(["a/# both 0"])
    telemq = bridged.telemq
    assert telemq is not None
    topic = "$SYS/broker/connection/edge.cloud/state"
    assert sys_value(telemq.port, topic) == "1"
    assert sys_value(bridged.mosquitto.port, topic) == "1"
    assert sys_value(telemq.port, "$SYS/broker/bridges/cloud/queued") == "0"
    bridged.mosquitto.stop()
    assert bridged.wait_state("down") or bridged.wait_state("connecting")
    assert wait_until(lambda: sys_value(telemq.port, topic, 1.0) == "0", 10.0)


def test_bridges_in_metrics(bridged: Bridged) -> None:
    """`/metrics` labels the bridge with its name: state, what came over it, its queue."""
    http_port = free_port()
    bridged.start(
        ["in/# in 1", "out/# out 1"], extra=f'[[http]]\nhost = "{HOST}"\nport = {http_port}\n'
    )

    def sample(name: str) -> float:
        return value(samples(http_port), name, bridge="cloud")

    assert sample("telemq_bridge_connected") == 1
    local = bridged.local()
    local.subscribe("in/#", qos=1)
    remote = bridged.remote()
    for n in range(3):
        remote.publish(f"in/{n}", "over", qos=1)
    local.wait_messages(3)
    assert sample("telemq_bridge_messages_received_total") == 3
    assert sample("telemq_bridge_messages_dropped_total") == 0
    bridged.mosquitto.stop()
    assert wait_until(lambda: sample("telemq_bridge_connected") == 0, 20.0)
    local.publish("out/waiting", "w", qos=1)
    assert wait_until(lambda: sample("telemq_bridge_queued_messages") == 1, 20.0)


def test_bridge_client_ids_are_reserved(bridged: Bridged) -> None:
    bridged.start(["a/# out 0"])
    assert bridged.telemq is not None
    client = PahoClient(bridged.telemq.port, client_id="$bridge/cloud")
    client.client.connect(HOST, bridged.telemq.port)
    client.client.loop_start()
    try:
        assert wait_until(lambda: bool(client.connacks), 5.0)
        assert client.connacks[-1][1] != 0
    finally:
        client.client.loop_stop()


def admin_get(port: int, path: str, **query: str) -> Any:
    """GET `path` of the admin API (`/api/v1`) on the HTTP listener at `port`, as `ADMIN`."""
    url = f"http://{HOST}:{port}/api/v1{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    request = urllib.request.Request(url)
    token = base64.b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def bridge_state(http_port: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The bridge sessions the broker holds (admin API: `/sessions`), and the topics
    subscribed for the bridge's queue (`/subscriptions`)."""
    sessions = admin_get(http_port, "/sessions", search=BRIDGE_SESSION)["sessions"]
    subscriptions = admin_get(http_port, "/subscriptions", client_id=BRIDGE_SESSION)
    return sessions, [s["topic"] for s in subscriptions["subscriptions"]]


def test_a_bridge_removed_from_the_configuration_leaves_nothing(bridged: Bridged) -> None:
    """Its session, with what it queued, and its queue's subscriptions go: the admin API
    lists none of them after the restart, nor after another one (the store forgot them)."""
    http_port = free_port()
    admin = users_and_acl({ADMIN[0]: ADMIN[1]}, [], admins={ADMIN[0]})
    http = f'[[http]]\nhost = "{HOST}"\nport = {http_port}\n'
    bridged.start(["jobs/# out 1"], relayed=True, before=f"{admin}\n{http}")
    telemq, relay = bridged.telemq, bridged.relay
    assert telemq is not None and relay is not None
    relay.blocked = True
    relay.cut()
    assert bridged.wait_state("down")
    bridged.local().publish("jobs/x", "queued", qos=1)

    # While configured: the bridge's session holds the copy, its queue subscribes jobs/#.
    def held() -> list[tuple[str, int]]:
        return [(s["client_id"], s["queued"] + s["inflight"]) for s in bridge_state(http_port)[0]]

    assert wait_until(lambda: held() == [(BRIDGE_SESSION, 1)], 10.0), held()
    assert bridge_state(http_port)[1] == ["jobs/#"]
    telemq.stop()
    text = telemq.config_path.read_text(encoding="utf-8")
    without = text[: text.index("[[bridges]]")] + text[text.index("\n[[listeners]]") :]
    telemq.config_path.write_text(without, encoding="utf-8")
    telemq.start()
    assert "bridge 'cloud' is no longer configured" in telemq.log_text()
    assert bridge_state(http_port) == ([], [])
    local = bridged.local()
    local.subscribe("jobs/#", qos=1)
    local.publish("jobs/y", "still routed", qos=1)
    assert [m.payload for m in local.wait_messages(1)] == [b"still routed"]
    # Nothing of it was left in the store either: a second restart brings none of it back.
    for client in bridged.clients:
        client.close()
    bridged.clients.clear()
    telemq.restart()
    assert bridge_state(http_port) == ([], [])
    # (The readiness probe's clean session ends with its connection.)
    assert wait_until(lambda: admin_get(http_port, "/overview")["sessions"] == 0, 10.0)


def _refusing_server(levels: list[int]) -> tuple[socket.socket, Callable[[], None]]:
    """A server that answers a private level (0x84) with CONNACK 1, as a broker without
    bridge support does, and a plain CONNECT with CONNACK 0; it records the level bytes."""
    server = socket.create_server((HOST, 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                data = conn.recv(256)
                if len(data) < 9:
                    continue
                levels.append(data[8])  # after 0x10, length, 00 04 MQTT
                conn.sendall(b"\x20\x02\x00" + (b"\x01" if data[8] & 0x80 else b"\x00"))
                if not data[8] & 0x80:
                    while not stop.is_set():  # hold the connection; drain
                        try:
                            if not conn.recv(256):
                                break
                        except TimeoutError:
                            continue
                        except OSError:
                            break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def close() -> None:
        stop.set()
        thread.join(5)
        server.close()

    return server, close


def test_try_private_falls_back_to_the_plain_level(tmp_path: Path) -> None:
    levels: list[int] = []
    server, close = _refusing_server(levels)
    telemq = BrokerProcess(
        tmp_path / "telemq",
        config_text=(
            'name = "edge"\nallow_anonymous = true\n'
            f'[[bridges]]\nname = "old"\nhost = "{HOST}"\nport = {server.getsockname()[1]}\n'
            'reconnect_min = 0.1\nreconnect_max = 0.5\nnotifications = false\ntopics = ["a/#"]\n'
        ),
    )
    try:
        telemq.start()
        assert wait_until(lambda: len(levels) >= 2, 15.0), levels
        assert levels[:2] == [0x84, 0x04]
    finally:
        telemq.finalize()
        close()


def test_mosquitto_bridges_into_telemq(tmp_path: Path) -> None:
    """Mosquitto's bridge (3.1.1, try_private) into telemq: loop-safe both ways."""
    telemq = BrokerProcess(tmp_path / "telemq", config_text="allow_anonymous = true\n").start()
    mosquitto = MosquittoProcess(
        tmp_path / "mosquitto",
        extra=(
            "connection tq\n"
            f"address {HOST}:{telemq.port}\n"
            "bridge_protocol_version mqttv311\n"
            "try_private true\n"
            "cleansession false\n"
            "restart_timeout 1\n"
            "topic mq/# both 2\n"
        ),
    )
    clients: list[PahoClient] = []
    try:
        mosquitto.start()
        at_telemq = PahoClient(telemq.port)
        at_telemq.connect()
        at_mosquitto = PahoClient(mosquitto.port)
        at_mosquitto.connect()
        clients += [at_telemq, at_mosquitto]
        at_telemq.subscribe("mq/#", qos=2)
        at_mosquitto.subscribe("mq/#", qos=2)
        # The bridge is up once a probe published at telemq reaches mosquitto.
        probe = PahoClient(telemq.port)
        probe.connect()
        clients.append(probe)

        def crossed() -> bool:
            probe.publish("mq/probe", "p", qos=0)
            return bool(at_mosquitto.received("mq/probe"))

        assert wait_until(crossed, 20.0, 0.3), mosquitto.log()
        # The probes still on their way arrive before a last one from the same publisher.
        probe.publish("mq/probe-last", "p", qos=0)
        at_telemq.wait_messages(1, topic="mq/probe-last")
        at_mosquitto.wait_messages(1, topic="mq/probe-last")
        at_telemq.messages.clear()
        at_mosquitto.messages.clear()
        probe.publish("mq/a", "from telemq", qos=2)
        sender = PahoClient(mosquitto.port)
        sender.connect()
        clients.append(sender)
        sender.publish("mq/b", "from mosquitto", qos=2)
        at_telemq.wait_messages(2)
        at_mosquitto.wait_messages(2)
        sync_both_ways(probe, sender, at_telemq, at_mosquitto, base="mq")
        assert sorted(chat(at_telemq)) == [b"from mosquitto", b"from telemq"]
        assert sorted(chat(at_mosquitto)) == [b"from mosquitto", b"from telemq"]
        assert connack_code(telemq.port) == 0  # telemq still serves everyone
    finally:
        for client in clients:
            client.close()
        mosquitto.finalize()
        telemq.finalize()
