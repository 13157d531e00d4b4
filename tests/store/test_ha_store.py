"""The PostgreSQL store's side of the election (docs/ha.md): the lock on the committing
connection is the leadership, and an elected store never connects again.

- Of two candidates on one database, one wins the lock, the other does not until the first
  one's session ends.
- An elected store commits on the connection that won; `check_leadership` says it holds the
  lock.
- Once that connection is cut (`pg_terminate_backend`), every call fails, "lost the
  connection that holds the leadership", for good: the store does not connect again, and the
  other candidate wins.
"""

from __future__ import annotations

from typing import Any

import pytest

from telemq.store import JournalRecord, PostgresLocation, StoreError, WriteBatch
from telemq.store.postgres import PostgresStore
from telemq.store.postgres_connection import connect, holds_lock, try_lock
from testsupport.postgres import PostgresServer
from testsupport.process import wait_until


def batch(seq: int) -> WriteBatch:
    written = WriteBatch()
    written.append_journal(
        JournalRecord(seq, 1_000 + seq, "t/a", "", 1, False, b"p", "pub", "u", b"", "")
    )
    return written


def candidate(dsn: str, member: str) -> Any:
    application = f"telemq (broker ha, member {member})"
    return connect(PostgresLocation(dsn), application=application, keepalives=True)


def backends(server: PostgresServer, application: str) -> list[int]:
    rows = server.admin(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application,)
    )
    return [int(row[0]) for row in rows]


def test_the_lock_elects_one_store_and_a_lost_connection_is_never_replaced(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    first, second = candidate(postgres_dsn, "a"), candidate(postgres_dsn, "b")
    try:
        assert try_lock(first) is True
        assert try_lock(second) is False
        store = PostgresStore(postgres_dsn, origin="ha", elected=first)
        assert store.elected
        store.commit(batch(1))
        store.check_leadership()
        assert holds_lock(first) and not holds_lock(second)

        (pid,) = backends(postgres_server, "telemq (broker ha, member a)")
        postgres_server.admin("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreError):
            store.commit(batch(2))
        for call in (lambda: store.commit(batch(2)), store.check_leadership, store.stats):
            with pytest.raises(StoreError, match="lost the connection that holds the leadership"):
                call()
        # Not connected again: no session of member a exists any more.
        assert backends(postgres_server, "telemq (broker ha, member a)") == []
        assert wait_until(lambda: try_lock(second), 10)
        store.close()

        taken = PostgresStore(postgres_dsn, origin="ha", elected=second)
        assert taken.load().next_seq == 2  # what the first one committed, and no more
        taken.commit(batch(2))
        taken.check_leadership()
        taken.close()
    finally:
        first.close()
        second.close()


def test_an_elected_connection_asks_for_keepalives(postgres_dsn: str) -> None:
    conn = candidate(postgres_dsn, "a")
    assert try_lock(conn)
    store = PostgresStore(postgres_dsn, elected=conn)
    try:
        assert "keepalives_idle=5" in conn.info.dsn
        row = conn.execute("SELECT current_setting('tcp_keepalives_idle')").fetchone()
        assert row is not None and row[0] == "5"
    finally:
        store.close()
