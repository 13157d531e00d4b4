"""Faults of the database under an `[ha]` group while it serves (docs/ha.md, docs/postgres.md):
two ``python -m telemq serve`` members, real paho clients, real PostgreSQL servers.

- The database stopped for 10 s and started again: the clients are dropped, nothing sent
  meanwhile is acknowledged, the members try again with backoff (few connection attempts)
  and log the loss and the return of the store once each, then one of them is active again
  and everything acknowledged before and after reaches the persistent subscriber. A broker
  without `[ha]` on another database of the server does the same: it starts again on the
  store's state once the server is back, logging the loss and the return once each.
- The active member's database connection swallowed by a relay (every socket open, nothing
  passes) while its MQTT clients stay connected: it acknowledges nothing more, steps down
  when its lease runs out, the other member takes over, and no acknowledgement of the first
  comes after one of the second.
- The active member frozen (SIGSTOP) while the server's keepalives still get answers: the
  server ends its session when the lease runs out, the other member takes over, and the
  frozen one, woken, acknowledges nothing it got meanwhile and stands by.
- PostgreSQL's own failover: a primary with a synchronous streaming replica, the members'
  DSN naming both (``target_session_attrs=read-write``), and a broker without `[ha]` on
  another database of the same server; the primary's machine "crashes" (SIGKILL of every
  server process) and the replica is promoted: the members and the lone broker find the new
  primary and nothing their publishers had acknowledged is lost, no QoS 2 message twice.

The tests stop and kill servers, so they use servers of their own, not the session's.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ha_support import (
    DEADLINE,
    TOPICS,
    Failover,
    Group,
    Publisher,
    RawClient,
    check_delivered,
    journal_counts,
)

from testsupport.postgres import REPLICA_NAME, SUPERUSER, PostgresServer, start_server
from testsupport.process import HOST, BrokerProcess, connack_code, wait_until
from testsupport.relay import Relay

pytestmark = [pytest.mark.interop]

OUTAGE_S = 10.0


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PostgresServer]:
    """A server this module may stop and start: in place of the session's, so that
    `postgres_dsn` (tests/store/conftest.py) makes its databases on this one."""
    server = start_server()
    yield server
    server.stop()


def via(relay: Relay, dsn: str, port: int) -> str:
    return dsn.replace(f"port={port}", f"port={relay.port}")


def clients(group: Group, prefix: str) -> tuple[Failover, Publisher]:
    subscriber = Failover(f"ha-subscriber-{prefix}", group.ports)
    subscriber.start(group["a"].port)
    subscriber.subscribe(TOPICS)
    publisher = Publisher(group.ports, prefix)
    publisher.start(group["a"].port)
    return subscriber, publisher


def more_acknowledged(publisher: Publisher, count: int = 100) -> None:
    before = len(publisher.acknowledged())
    assert wait_until(lambda: len(publisher.acknowledged()) >= before + count, DEADLINE)


def test_the_database_stopped_for_10_s(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path
) -> None:
    relay = Relay(postgres_server.port)  # counts member a's connection attempts
    group = Group(
        postgres_server,
        postgres_dsn,
        tmp_path,
        dsns={"a": via(relay, postgres_dsn, postgres_server.port)},
    )
    a, b = group["a"], group["b"]
    alone_db = postgres_server.create_database()  # a broker without [ha] on it
    alone = BrokerProcess(
        tmp_path / "alone",
        config_text=(
            f'[store]\nkind = "postgres"\ndsn = "{postgres_server.dsn(alone_db, password=False)}"\n'
            f'password_file = "{tmp_path / "pg.password"}"\nsync = "full"\n'
        ),
    )
    try:
        a.process.start()
        assert group.wait_for_one_active() is a
        b.process.start()
        alone.start()
        subscriber, publisher = clients(group, "outage")
        raw, raw_alone = RawClient(a.port), RawClient(alone.port)
        try:
            more_acknowledged(publisher)
            postgres_server.pause()
            attempts = relay.accepted
            for client in (raw, raw_alone):
                client.publish_qos1("ha/q1", b"during the outage", 7)
                answer = client.read_all()  # until the broker drops the connection
                assert b"\x40\x02\x00\x07" not in answer, answer  # no PUBACK
            assert wait_until(lambda: group.active() == [], DEADLINE)
            time.sleep(OUTAGE_S)
            attempts = relay.accepted - attempts
            postgres_server.start_again()
            group.wait_for_one_active()
            more_acknowledged(publisher)
            assert wait_until(lambda: connack_code(alone.port) == 0, DEADLINE)
        finally:
            raw.close()
            raw_alone.close()
            sent = publisher.stop()
        journaled = check_delivered(subscriber, sent, postgres_dsn)
        assert "during the outage" not in journaled
        assert "during the outage" not in journal_counts(postgres_server.dsn(alone_db))
        log = alone.log_text()
        assert log.count("starting again on the store's state") == 1, log[-3000:]
        assert log.count("cannot start again on the store") == 1, log[-3000:]
        assert log.count("the store is reachable again") == 1, log[-3000:]
        # Backing off: a poll every 0.2 s would be 50 tries in 10 s.
        assert 2 <= attempts <= 15, attempts
        for member in (a, b):  # the standby's next try may be a backoff away
            assert wait_until(
                lambda m=member: "the store is reachable again" in m.process.log_text(), DEADLINE
            )
            log = member.process.log_text()
            assert log.count("stepping down") <= 1, log[-3000:]
            assert log.count("cannot reach the store to stand for election") == 1, log[-3000:]
            assert log.count("the store is reachable again") == 1, log[-3000:]
        assert "stepping down" in a.process.log_text()
    finally:
        relay.close()  # first: a connection attempt stuck in it would delay a's stop
        group.finalize()
        alone.finalize()


def test_a_connection_that_swallows_everything_makes_the_active_member_step_down(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path
) -> None:
    relay = Relay(postgres_server.port)
    group = Group(
        postgres_server,
        postgres_dsn,
        tmp_path,
        dsns={"a": via(relay, postgres_dsn, postgres_server.port)},
        lease=2.0,
    )
    a, b = group["a"], group["b"]
    try:
        a.process.start()
        assert group.wait_for_one_active() is a
        b.process.start()
        subscriber, publisher = clients(group, "blackhole")
        raw = RawClient(a.port)
        try:
            more_acknowledged(publisher)
            relay.blackholed = True  # a's clients stay connected to a
            raw.publish_qos1("ha/q1", b"into the void", 7)
            answer = raw.read_all()  # until a drops the connection
            assert b"\x40\x02\x00\x07" not in answer, answer  # no PUBACK
            assert group.wait_for_one_active(other_than=a) is b
            assert wait_until(lambda: a.role() == "standby", DEADLINE)  # stepped down, running
            more_acknowledged(publisher)
            assert [m.name for m in group.active()] == ["b"]
        finally:
            raw.close()
            sent = publisher.stop()
        journaled = check_delivered(subscriber, sent, postgres_dsn)
        assert "into the void" not in journaled
        # Acknowledged by a, then by b: never by a once b had begun.
        ports = publisher.ack_ports
        assert b.port in ports
        assert a.port not in ports[ports.index(b.port) :]
        log = a.process.log_text()
        assert "stepping down: the store did not answer for 2 s (the lease)" in log, log[-3000:]
    finally:
        relay.close()  # first: a connection attempt stuck in it would delay a's stop
        group.finalize()


def test_the_server_ends_the_session_of_a_frozen_active_member(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path
) -> None:
    """SIGSTOP: the member's sockets stay open and its kernel answers the server's
    keepalives; only the lease ends its session and frees the lock."""
    group = Group(postgres_server, postgres_dsn, tmp_path, lease=2.0)
    a, b = group["a"], group["b"]
    try:
        a.process.start()
        assert group.wait_for_one_active() is a
        b.process.start()
        raw = RawClient(a.port)
        try:
            assert a.process.proc is not None
            a.process.proc.send_signal(signal.SIGSTOP)
            raw.publish_qos1("ha/q1", b"while frozen", 7)
            try:
                assert wait_until(lambda: b.role() == "active", DEADLINE)
            finally:
                a.process.proc.send_signal(signal.SIGCONT)
            answer = raw.read_all()  # until a, awake, drops the connection
            assert b"\x40\x02\x00\x07" not in answer, answer  # no PUBACK
            assert wait_until(lambda: a.role() == "standby", DEADLINE)
            assert [m.name for m in group.active()] == ["b"]
        finally:
            raw.close()
        assert "while frozen" not in journal_counts(postgres_dsn)
        assert "stepping down" in a.process.log_text()
    finally:
        group.finalize()


def test_postgresql_fails_over_to_its_synchronous_replica(tmp_path: Path) -> None:
    """An `[ha]` pair on one database, and a broker without `[ha]` on another, of the same
    replicated server."""
    primary = start_server()
    replica: PostgresServer | None = None
    group: Group | None = None
    alone: BrokerProcess | None = None
    try:
        dbname, alone_db = primary.create_database(), primary.create_database()
        replica = primary.replica()
        primary.admin(f"ALTER SYSTEM SET synchronous_standby_names = '{REPLICA_NAME}'")
        primary.admin("SELECT pg_reload_conf()")
        assert wait_until(
            lambda: primary.admin("SELECT sync_state FROM pg_stat_replication") == [("sync",)],
            DEADLINE,
        )
        hosts = f"host={HOST},{HOST} port={primary.port},{replica.port} user={SUPERUSER}"
        dsn = f"{hosts} dbname={dbname} target_session_attrs=read-write"
        alone_dsn = f"{hosts} dbname={alone_db} target_session_attrs=read-write"
        group = Group(primary, dsn, tmp_path / "group")
        a, b = group["a"], group["b"]
        a.process.start()
        assert group.wait_for_one_active() is a
        b.process.start()
        secret = tmp_path / "group" / "pg.password"
        alone = BrokerProcess(
            tmp_path / "alone",
            config_text=(
                f'[store]\nkind = "postgres"\ndsn = "{alone_dsn}"\n'
                f'password_file = "{secret}"\nsync = "full"\n'
            ),
        )
        alone.start()
        subscriber, publisher = clients(group, "pgfail")
        alone_subscriber = Failover("pgfail-alone-subscriber", [alone.port])
        alone_subscriber.start(alone.port)
        alone_subscriber.subscribe(TOPICS)
        alone_publisher = Publisher([alone.port], "pgfail-alone")
        alone_publisher.start(alone.port)
        try:
            more_acknowledged(publisher, 200)
            more_acknowledged(alone_publisher, 200)
            before = publisher.acknowledged() | alone_publisher.acknowledged()
            primary.crash()
            replica.promote()
            group.wait_for_one_active()
            more_acknowledged(publisher, 200)
            more_acknowledged(alone_publisher, 200)
        finally:
            sent = publisher.stop()
            alone_sent = alone_publisher.stop()
        assert before <= sent | alone_sent
        check_delivered(subscriber, sent, f"{dsn} password={primary.password}")
        check_delivered(alone_subscriber, alone_sent, f"{alone_dsn} password={primary.password}")
        assert "serving again on the store's state" in alone.log_text()  # the new primary's
    finally:
        if alone is not None:
            alone.finalize()
        if group is not None:
            group.finalize()
        if replica is not None:
            replica.stop()
        primary.stop()
