"""One active broker and a standby on one PostgreSQL database (`[ha]`, docs/ha.md), as an
operator runs them: two ``python -m telemq serve`` processes, real paho clients.

- Exactly one is active: `/health` 200 on it, 503 on the other; the standby refuses MQTT
  CONNECT (3.1.1: return code 3; 5.0: 0x88 with the Server Reference it is configured
  with), and the active one shows its role in `/metrics`.
- SIGKILL the active broker: the standby takes over, and a persistent subscriber that knows
  both addresses resumes its session there (session present) and gets every message the
  publisher had acknowledged, QoS 2 exactly once. The takeover time is printed.
- Split brain: the active broker's database connection is cut while its clients stay
  connected: it acknowledges nothing more, drops its clients, steps down and does not take
  the lock back while the other one is active; the other takes over; nothing acknowledged
  is lost or doubled.
- Kill and restart the active member alternately, four takeovers under load: nothing
  acknowledged is lost, no QoS 2 message arrives twice, in the subscriber or the journal.
- A member elected on a database of a newer schema exits 2 naming it, as without `[ha]`:
  only the loss of the connection makes a member stand by again.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from ha_support import (
    DEADLINE,
    TOPICS,
    Failover,
    Group,
    Member,
    Publisher,
    RawClient,
    check_delivered,
    health,
    q2_duplicates,
    started_group,
    terminate_backend,
)
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from telemq.store.postgres import PostgresStore
from telemq.store.postgres_schema import SCHEMA_VERSION
from testsupport.postgres import PostgresServer
from testsupport.process import HOST, connack_code, unique, wait_until

pytestmark = [pytest.mark.interop]


@pytest.fixture
def group(postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path) -> Iterator[Group]:
    """Members a and b, a started first: a is active, b stands by."""
    with started_group(postgres_server, postgres_dsn, tmp_path) as members:
        yield members


def dbname(dsn: str) -> str:
    found = re.search(r"dbname=(\S+)", dsn)
    assert found is not None
    return found.group(1)


def connack5(port: int) -> tuple[int, str | None]:
    """An MQTT 5.0 CONNECT's CONNACK from `port`: (reason code, Server Reference)."""
    answers: list[tuple[int, str | None]] = []
    client = paho.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=unique("v5"),
        protocol=paho.MQTTv5,
    )

    def on_connect(
        client: object, userdata: object, flags: object, rc: object, props: object
    ) -> None:
        reference = getattr(props, "ServerReference", None)
        answers.append((int(rc.value), reference))  # type: ignore[attr-defined]

    client.on_connect = on_connect
    client.connect(HOST, port, properties=Properties(PacketTypes.CONNECT))
    client.loop_start()
    try:
        assert wait_until(lambda: bool(answers), 10), "no CONNACK"
    finally:
        client.loop_stop()
        client.disconnect()
    return answers[0]


def takeover(group: Group, old: Member, started: float) -> Member:
    new = group.wait_for_one_active(other_than=old)
    took = time.monotonic() - started
    print(f"takeover: member {new.name} active {took:.2f} s after member {old.name} ended")
    return new


def test_one_member_is_active_and_the_standby_refuses(group: Group) -> None:
    a, b = group["a"], group["b"]
    assert health(a.http)[0] == 200 and a.role() == "active"
    status, body = health(b.http)
    assert status == 503, body
    assert body["role"] == "standby" and body["member"] == "b" and body["ha"] is True
    # The lock's holder, as the server names it (once b tried for the lock).
    assert wait_until(lambda: "member a" in (health(b.http)[1].get("active") or ""), 10)
    assert connack_code(b.port) == 3  # 3.1.1: server unavailable
    assert connack5(b.port) == (0x88, a.address)  # 5.0: server unavailable, go there
    assert connack_code(a.port) == 0
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{HOST}:{b.http}/api/v1/overview", timeout=5)
    assert refused.value.code == 503  # a standby serves nothing but /health


def test_the_standby_takes_over_from_a_killed_active_broker(group: Group) -> None:
    a, b = group["a"], group["b"]
    subscriber = Failover("ha-subscriber", group.ports)
    subscriber.start(a.port)
    subscriber.subscribe(TOPICS)
    publisher = Publisher(group.ports, "kill")
    publisher.start(a.port)
    try:
        assert wait_until(lambda: len(publisher.acknowledged()) >= 100, DEADLINE)
        killed_at = time.monotonic()
        a.process.kill()
        before = publisher.acknowledged()
        assert takeover(group, a, killed_at) is b
        assert wait_until(lambda: len(publisher.acknowledged()) >= len(before) + 100, DEADLINE)
    finally:
        sent = publisher.stop()
    assert wait_until(lambda: set(subscriber.payloads()) >= sent, DEADLINE), sorted(
        sent - set(subscriber.payloads())
    )[:10]
    assert before <= set(subscriber.payloads())
    assert (b.port, True) in subscriber.connacks  # the session resumed on b
    time.sleep(0.5)  # a duplicate would arrive now
    assert q2_duplicates(subscriber.payloads()) == []
    subscriber.stop()
    metrics = urllib.request.urlopen(f"http://{HOST}:{b.http}/metrics", timeout=5).read().decode()
    assert "telemq_ha_active 1.0" in metrics
    assert re.search(r"telemq_ha_takeovers_total 1\.0", metrics), metrics[-2000:]


def test_an_active_broker_cut_off_from_its_database_steps_down(
    group: Group, postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    a, b = group["a"], group["b"]
    subscriber = Failover("ha-subscriber", group.ports)
    subscriber.start(a.port)
    subscriber.subscribe(TOPICS)
    publisher = Publisher(group.ports, "cut")
    publisher.start(a.port)
    raw = RawClient(a.port)
    try:
        assert wait_until(lambda: len(publisher.acknowledged()) >= 100, DEADLINE)
        before = publisher.acknowledged()
        cut_at = time.monotonic()
        terminate_backend(postgres_server, dbname(postgres_dsn), "a")  # a's clients connected
        raw.publish_qos1("ha/q1", b"after the cut", 7)
        answer = raw.read_all()
        assert b"\x40\x02\x00\x07" not in answer, answer  # no PUBACK: a acknowledges nothing
        assert takeover(group, a, cut_at) is b
        # a stepped down: still running, a standby that refuses clients, and it does not
        # take the lock back from b (it tries again after its rejoin delay: b holds it).
        assert a.process.running and a.role() == "standby"
        assert connack_code(a.port) == 3
        assert wait_until(lambda: "member b" in (health(a.http)[1].get("active") or ""), 30)
        assert [m.name for m in group.active()] == ["b"]
        assert wait_until(lambda: len(publisher.acknowledged()) >= len(before) + 100, DEADLINE)
        assert [m.name for m in group.active()] == ["b"]
    finally:
        raw.close()
        sent = publisher.stop()
    log = a.process.log_text()
    assert "stepping down: lost the connection that holds the leadership" in log, log[-3000:]
    assert "connecting to the postgres store" not in log  # never connected again on its own
    journaled = check_delivered(subscriber, sent, postgres_dsn)
    assert (b.port, True) in subscriber.connacks  # dropped by a, resumed on b
    assert "after the cut" not in journaled


def test_four_takeovers_lose_nothing_acknowledged(
    group: Group, postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    """SIGKILL and a cut database connection in turn, four takeovers under load; a killed
    member is started again and stands by, a cut-off one stands by by itself."""
    subscriber = Failover("ha-subscriber", group.ports)
    subscriber.start(group["a"].port)
    subscriber.subscribe(TOPICS)
    publisher = Publisher(group.ports, "soak")
    publisher.start(group["a"].port)
    active = group["a"]
    try:
        for turn in range(4):
            count = len(publisher.acknowledged())
            assert wait_until(lambda c=count: len(publisher.acknowledged()) >= c + 80, DEADLINE)
            ended_at = time.monotonic()
            if turn % 2 == 0:
                active.process.kill()
            else:
                terminate_backend(postgres_server, dbname(postgres_dsn), active.name)
            new = takeover(group, active, ended_at)
            if turn % 2 == 0:
                active.process.start()  # back, as a standby
            assert wait_until(lambda old=active: old.role() == "standby", DEADLINE)
            active = new
        count = len(publisher.acknowledged())
        assert wait_until(lambda: len(publisher.acknowledged()) >= count + 80, DEADLINE)
    finally:
        sent = publisher.stop()
    check_delivered(subscriber, sent, postgres_dsn)
    print(f"four takeovers: {len(sent)} messages acknowledged, none lost, no QoS 2 twice")


def test_a_member_elected_on_a_database_of_a_newer_schema_exits_2(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """What is not the connection's fault is not stood by: as without `[ha]`."""
    store = PostgresStore(postgres_dsn)
    assert store._conn is not None
    store._conn.execute("UPDATE telemq_schema SET version = %s", (SCHEMA_VERSION + 1,))
    store.close()
    group = Group(postgres_server, postgres_dsn, tmp_path)
    config = group["a"].process.config_path
    done = subprocess.run(
        [sys.executable, "-m", "telemq", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"telemq: cannot start: the postgres store has schema version {SCHEMA_VERSION + 1}" in (
        done.stderr
    )
