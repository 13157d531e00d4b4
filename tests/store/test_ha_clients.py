"""How clients find the active broker of an `[ha]` group (docs/ha.md, "Clients find the
active broker"), each way tested with the real thing:

- **A TCP load balancer that routes by `/health`**: Debian's HAProxy runs the example
  configuration of the docs (docs/examples/haproxy.cfg, its addresses replaced by the
  test's); paho clients that know only HAProxy's address reach the active member, and after
  the active member is SIGKILLed they reconnect through HAProxy to the new active one, where
  their persistent session resumes (session present) and every acknowledged message arrives,
  QoS 2 once.
- **Clients that know every address**: a paho client following its list (ha_support's
  `Failover`) and MQTT.js with its `servers` option are away while the active member is
  killed and the standby takes over (paho's reconnecting thread held, the Node process
  stopped with SIGSTOP), QoS 1 messages are published to the new active member meanwhile;
  then both reconnect through their lists, land on the new active member with session
  present 1 and get the messages queued for them while they were away.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from ha_support import DEADLINE, Failover, Group, Publisher, started_group
from paho.mqtt.enums import CallbackAPIVersion

from testsupport.node import MqttJsClient, payload, require_mqttjs
from testsupport.postgres import PostgresServer
from testsupport.process import HOST, connack_code, free_port, unique, wait_until
from testsupport.requirements import require_command

pytestmark = [pytest.mark.interop]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "haproxy.cfg"
TOPICS = [("ha/q1", 1), ("ha/q2", 2)]


@pytest.fixture
def group(postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path) -> Iterator[Group]:
    """Members a and b, a started first: a is active, b stands by."""
    with started_group(postgres_server, postgres_dsn, tmp_path) as members:
        yield members


def haproxy_config(port: int, group: Group) -> str:
    """The docs' example with this test's addresses: HAProxy on `port`, the members' MQTT and
    `/health` ports in place of edge-1's and edge-2's."""
    text = EXAMPLE.read_text(encoding="utf-8")
    replacements = {"bind :1883": f"bind {HOST}:{port}"}
    for example, member in (("edge-1", group["a"]), ("edge-2", group["b"])):
        server = f"{example}.example:1883 check port 8080"
        replacements[server] = f"{HOST}:{member.port} check port {member.http}"
    for old, new in replacements.items():
        assert text.count(old) == 1, f"the example no longer has {old!r} once"
        text = text.replace(old, new)
    return text


@contextlib.contextmanager
def haproxy(config: str, port: int, workdir: Path) -> Iterator[None]:
    """HAProxy in the foreground with `config`, until the block ends."""
    program = require_command("haproxy", "haproxy", path="/usr/sbin:/usr/local/sbin")
    path = workdir / "haproxy.cfg"
    path.write_text(config, encoding="utf-8")
    check = subprocess.run([program, "-c", "-f", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    log = workdir / "haproxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [program, "-db", "-f", str(path)], stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    try:

        def listening() -> bool:
            assert proc.poll() is None, log.read_text(errors="replace")
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), 2):
                return True
            return False

        assert wait_until(listening, 20), "HAProxy does not listen"
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def routes_to_the_active_member(port: int, tries: int = 6) -> bool:
    """Whether `tries` new connections through HAProxy in a row are all accepted."""
    return all(connack_code(port) == 0 for _ in range(tries))


def test_the_docs_show_the_example_haproxy_configuration() -> None:
    """docs/ha.md quotes docs/examples/haproxy.cfg, the file the test below runs."""
    doc = (EXAMPLE.parents[1] / "ha.md").read_text(encoding="utf-8")
    assert EXAMPLE.read_text(encoding="utf-8") in doc


def test_clients_through_haproxy_follow_the_active_member(group: Group, tmp_path: Path) -> None:
    a, b = group["a"], group["b"]
    port = free_port()
    with haproxy(haproxy_config(port, group), port, tmp_path):
        # HAProxy checks /health: every new connection goes to a (without the checks, round
        # robin would send every other one to b, which refuses it).
        assert wait_until(lambda: routes_to_the_active_member(port), DEADLINE)
        subscriber = Failover("ha-lb-subscriber", [port])
        subscriber.start(port)  # accepted: HAProxy sent it to a (b refuses every CONNECT)
        subscriber.subscribe(TOPICS)
        assert subscriber.connacks == [(port, False)]
        publisher = Publisher([port], "lb")
        publisher.start(port)
        try:
            assert wait_until(lambda: len(publisher.acknowledged()) >= 100, DEADLINE)
            a.process.kill()
            before = publisher.acknowledged()
            assert group.wait_for_one_active(other_than=a) is b
            assert wait_until(lambda: routes_to_the_active_member(port), DEADLINE)  # to b
            assert wait_until(lambda: len(publisher.acknowledged()) >= len(before) + 100, DEADLINE)
        finally:
            sent = publisher.stop()
        assert wait_until(lambda: set(subscriber.payloads()) >= sent, DEADLINE), sorted(
            sent - set(subscriber.payloads())
        )[:10]
        assert before <= set(subscriber.payloads())
        # Reconnected through HAProxy, to b: the session was there.
        assert subscriber.connacks[1:] and all(present for _, present in subscriber.connacks[1:])
        time.sleep(0.5)  # a duplicate would arrive now
        twice = [p for p, n in subscriber.payloads().items() if ":q2:" in p and n > 1]
        assert twice == []
        subscriber.stop()


class HeldFailover(Failover):
    """A `Failover` whose reconnecting thread waits while `away` is set: the client stays
    away from every member until the test lets it go."""

    def __init__(self, client_id: str, ports: list[int]) -> None:
        super().__init__(client_id, ports)
        self.away = threading.Event()

    def _run(self, first: int) -> None:
        index = self.ports.index(first)
        while not self._stopping.is_set():
            while self.away.is_set() and not self._stopping.is_set():
                time.sleep(0.02)
            with contextlib.suppress(OSError):
                self.client.connect(HOST, self.ports[index], keepalive=30)
                self.client.loop_forever()
            index = (index + 1) % len(self.ports)
            self._stopping.wait(0.05)


def publish_qos1(port: int, topic: str, payloads: list[str]) -> None:
    """Publish `payloads` at QoS 1 with a clean session; return once each was acknowledged."""
    client = paho.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=unique("p"))
    client.connect(HOST, port)
    client.loop_start()
    try:
        for payload in payloads:
            info = client.publish(topic, payload, 1)
            info.wait_for_publish(10)
            assert info.is_published(), payload
    finally:
        client.disconnect()
        client.loop_stop()


def test_clients_that_know_both_addresses_resume_on_the_new_active_member(
    group: Group,
) -> None:
    require_mqttjs()
    a, b = group["a"], group["b"]
    topic = "ha/away"
    paho_client = HeldFailover("ha-list-paho", group.ports)
    paho_client.start(a.port)
    paho_client.subscribe([(topic, 1)])
    with MqttJsClient(timeout=DEADLINE) as mqttjs:
        servers = [{"host": HOST, "port": a.port}, {"host": HOST, "port": b.port}]
        first = mqttjs.connect(
            a.port,
            servers=servers,
            clientId="ha-list-mqttjs",
            clean=False,
            reconnectPeriod=200,
            reconnectOnConnackError=True,  # a standby's refusal: try the next server
        )
        assert first["packet"]["sessionPresent"] is False
        mqttjs.subscribe(topic, qos=1)
        # Both clients away: paho's thread held, the Node process stopped.
        paho_client.away.set()
        os.kill(mqttjs.pid, signal.SIGSTOP)
        try:
            a.process.kill()
            assert group.wait_for_one_active(other_than=a) is b
            queued = [f"away-{i}" for i in range(20)]
            publish_qos1(b.port, topic, queued)  # acknowledged by b: queued for both
        finally:
            os.kill(mqttjs.pid, signal.SIGCONT)
            paho_client.away.clear()
        resumed = mqttjs.wait_for("connect")
        assert resumed["packet"]["sessionPresent"] is True
        got = [payload(message).decode() for message in mqttjs.messages(len(queued))]
        assert sorted(got) == sorted(queued)
        assert {m["qos"] for m in mqttjs.history if m.get("event") == "message"} == {1}
    assert wait_until(lambda: set(paho_client.payloads()) >= set(queued), DEADLINE), sorted(
        paho_client.payloads()
    )
    assert (b.port, True) in paho_client.connacks
    paho_client.stop()
