"""The PostgreSQL store's side of the election (docs/ha.md): the lock on the committing
connection is the leadership, and an elected store never connects again.

- Of two candidates on one database, one wins the lock, the other does not until the first
  one's session ends.
- An elected store commits on the connection that won; `check_leadership` says it holds the
  lock.
- Once that connection is cut (`pg_terminate_backend`), every call fails, "lost the
  connection that holds the leadership", for good: the store does not connect again, and the
  other candidate wins.
- The lease: a silent elected session is ended by the server, and `abandon` makes a call
  stuck on the connection fail at once, from another thread.
- The broker's committer never runs what waits for a commit that failed (the
  acknowledgements), whether the commit ran on the writer thread or on the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from telemq.broker.core.committer import INLINE_MIN_ACTIONS, Committer
from telemq.store import JournalRecord, PostgresLocation, SessionRecord, StoreError, WriteBatch
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


def test_the_lease_ends_a_silent_session_and_abandon_ends_a_stuck_call(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    first, second = candidate(postgres_dsn, "a"), candidate(postgres_dsn, "b")
    store = PostgresStore(postgres_dsn, origin="ha", elected=first)
    try:
        store.hold_lease(0.3)
        assert wait_until(lambda: try_lock(second), 10)  # the server ended the silent session
        with pytest.raises(StoreError, match="lost the connection that holds the leadership"):
            store.check_leadership()
        store.close()

        store = PostgresStore(postgres_dsn, origin="ha", elected=second)
        failed: list[BaseException] = []

        def commit() -> None:
            try:
                store.commit(batch(1))
            except StoreError as error:
                failed.append(error)

        blocker = connect(PostgresLocation(postgres_dsn))
        try:
            blocker.execute("BEGIN")
            blocker.execute("LOCK TABLE journal IN ACCESS EXCLUSIVE MODE")
            stuck = threading.Thread(target=commit)
            stuck.start()
            assert wait_until(
                lambda: (
                    postgres_server.admin(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    )
                    != [(0,)]
                ),
                10,
            )
            store.abandon("stuck")
            stuck.join(10)
            assert not stuck.is_alive() and len(failed) == 1
        finally:
            blocker.close()
        with pytest.raises(StoreError, match="lost the connection that holds the leadership"):
            store.commit(batch(1))
    finally:
        store.close()
        first.close()
        second.close()


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


def test_a_failed_commit_never_runs_what_waits_for_it(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    conn = candidate(postgres_dsn, "a")
    assert try_lock(conn)
    store = PostgresStore(postgres_dsn, elected=conn)
    (pid,) = backends(postgres_server, "telemq (broker ha, member a)")
    postgres_server.admin("SELECT pg_terminate_backend(%s)", (pid,))
    executor = ThreadPoolExecutor(1)
    on_loop: list[bool] = []  # per commit: did it run on the event loop's thread?
    commit = store.commit

    def watched(batch: WriteBatch) -> None:
        on_loop.append(threading.current_thread() is threading.main_thread())
        commit(batch)

    store.commit = watched  # type: ignore[method-assign]

    async def main() -> tuple[list[str], list[BaseException], int]:
        failures: list[BaseException] = []
        committer = Committer(store, asyncio.get_running_loop(), executor, failures.append)
        ran: list[str] = []
        # One acknowledgement waiting: the commit runs on the writer thread.
        committer.pending.put_session(SessionRecord("lone"))
        committer.after(lambda: ran.append("lone"))
        await committer.drain()
        # Several waiting on a small batch: the commit runs on the event loop.
        for index in range(INLINE_MIN_ACTIONS + 1):
            committer.pending.put_session(SessionRecord(f"c{index}"))
            committer.after(lambda index=index: ran.append(f"c{index}"))
        await committer.drain()
        return ran, failures, committer.commits

    try:
        ran, failures, commits = asyncio.run(main())
    finally:
        executor.shutdown()
        store.close()
    assert on_loop == [False, True]
    assert ran == [] and commits == 0
    assert len(failures) == 2
    assert all("lost the connection that holds the leadership" in str(f) for f in failures)
