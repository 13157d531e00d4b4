"""The group committer against a real SQLite store and writer thread.

A store whose commits can be held open stands in for a slow disk, so the tests see
what happens while a commit runs: the next batch, the order of acknowledgements, the
backlog bound that pauses readers, the sealing of journal rows.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from telemq.broker.core import committer as committer_module
from telemq.broker.core.committer import Committer
from telemq.store import SessionRecord, SqliteStore, SyncMode, WriteBatch
from telemq.store.base import JOURNAL_CHUNK_ROWS, JOURNAL_FIELDS


class HeldStore(SqliteStore):
    """Commits wait for `release` (set: they go straight through), then `delay` seconds."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, SyncMode.NORMAL)
        self.release = threading.Event()
        self.started = threading.Event()
        self.batches: list[int] = []
        self.on_loop: list[bool] = []  # per commit: did it run on the event loop's thread?
        self.delay = 0.0

    def commit(self, batch: WriteBatch) -> None:
        self.started.set()
        assert self.release.wait(10), "commit held too long"
        self.batches.append(len(batch))
        self.on_loop.append(threading.current_thread() is threading.main_thread())
        if self.delay:
            time.sleep(self.delay)
        super().commit(batch)


def row(seq: int) -> tuple[int, int, str, str, int, bool, bytes, str, str, int]:
    return (seq, seq, "t", "", 0, False, b"p", "c", "", 0)  # 0: no properties (JournalRow)


async def until(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.002)


async def small_commits(committer: Committer, rounds: int) -> None:
    """`rounds` commits one after the other, each of INLINE_MIN_ACTIONS writes and as many
    acknowledgements: small ones that may run on the loop."""
    done: list[int] = []
    for round_ in range(1, rounds + 1):
        for client in range(committer_module.INLINE_MIN_ACTIONS):
            committer.pending.put_session(SessionRecord(f"{round_}-{client}"))
            committer.after(lambda: done.append(1))
        expected = round_ * committer_module.INLINE_MIN_ACTIONS
        await until(lambda expected=expected: len(done) == expected)


def run(
    tmp_path: Path, body: object, send: Callable[[], None] | None = None, linger: float = 0.5
) -> None:
    store = HeldStore(tmp_path / "telemq.db")
    store.load()
    executor = ThreadPoolExecutor(1)

    async def main() -> None:
        failures: list[BaseException] = []
        committer = Committer(
            store, asyncio.get_running_loop(), executor, failures.append, linger, send=send
        )
        assert callable(body)
        await body(store, committer)
        store.release.set()
        await committer.drain()
        assert failures == []

    try:
        asyncio.run(main())
    finally:
        store.release.set()
        executor.shutdown()
        store.close()


def test_actions_run_after_their_commit_in_order_and_the_next_batch_is_already_going(
    tmp_path: Path,
) -> None:
    async def body(store: HeldStore, committer: Committer) -> None:
        seen: list[str] = []
        committer.pending.put_session(SessionRecord("a"))
        committer.after(lambda: seen.append(f"a busy={committer._busy}"))
        await until(store.started.is_set)  # batch 1 is on the writer, held
        committer.pending.put_session(SessionRecord("b"))
        committer.after(lambda: seen.append("b"))
        await asyncio.sleep(0.05)
        assert seen == []  # nothing is acknowledged before its commit
        store.release.set()
        await until(lambda: len(seen) == 2)
        # a's action ran with batch 2 already handed to the writer.
        assert seen == ["a busy=True", "b"]
        assert store.batches == [1, 1]

    run(tmp_path, body)


def test_backlog_behind_a_running_commit_calls_on_commit_once_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(committer_module, "MAX_BACKLOG", 50)

    async def body(store: HeldStore, committer: Committer) -> None:
        committer.pending.put_session(SessionRecord("a"))
        committer.schedule()
        await until(store.started.is_set)
        assert not committer.backlogged
        for seq in range(1, 50):
            committer.pending.append_journal_row(row(seq))
            committer.schedule_lazy()
        assert not committer.backlogged  # 49 waiting
        committer.pending.append_journal_row(row(50))
        assert committer.backlogged
        resumed: list[bool] = []
        committer.on_commit = lambda: resumed.append(True)
        store.release.set()
        await until(lambda: bool(resumed))
        assert not committer.backlogged
        await committer.drain()
        assert store.batches == [1, 50]

    run(tmp_path, body)


def test_journal_rows_waiting_for_the_writer_are_sealed(tmp_path: Path) -> None:
    async def body(store: HeldStore, committer: Committer) -> None:
        committer.pending.put_session(SessionRecord("a"))
        committer.schedule()
        await until(store.started.is_set)
        for seq in range(1, JOURNAL_CHUNK_ROWS + 6):
            committer.pending.append_journal_row(row(seq))
        await until(lambda: len(committer.pending.journal_chunks) == 1)
        assert len(committer.pending.journal) == 5 * JOURNAL_FIELDS
        store.release.set()
        await committer.drain()
        assert store.stats().journal_rows == JOURNAL_CHUNK_ROWS + 5

    run(tmp_path, body)


def test_a_small_batch_that_several_acknowledgements_wait_for_commits_on_the_loop(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    async def body(store: HeldStore, committer: Committer) -> None:
        store.release.set()
        for name in "abcd":  # INLINE_MIN_ACTIONS acknowledgements, four writes
            committer.pending.put_session(SessionRecord(name))
            committer.after(functools.partial(seen.append, name))
        await until(lambda: len(seen) == 5)
        assert store.on_loop == [True]
        assert seen == ["a", "b", "c", "d", "sent"]  # acknowledgements written at once

    run(tmp_path, body, send=lambda: seen.append("sent"))


def test_a_lone_acknowledgement_and_a_large_batch_go_to_the_writer_thread(
    tmp_path: Path,
) -> None:
    async def body(store: HeldStore, committer: Committer) -> None:
        store.release.set()
        done: list[int] = []
        committer.pending.put_session(SessionRecord("alone"))
        committer.after(lambda: done.append(1))
        await until(lambda: done == [1])
        # Four acknowledgements, but more writes than a commit on the loop may take.
        for seq in range(1, committer_module.INLINE_MAX_OPS + 2):
            committer.pending.put_session(SessionRecord(f"s{seq}"))
        for _ in range(committer_module.INLINE_MIN_ACTIONS):
            committer.after(lambda: done.append(2))
        await until(lambda: len(done) == 1 + committer_module.INLINE_MIN_ACTIONS)
        assert store.on_loop == [False, False]

    run(tmp_path, body)


def test_commits_go_back_to_the_writer_thread_once_they_are_slow(tmp_path: Path) -> None:
    async def body(store: HeldStore, committer: Committer) -> None:
        store.release.set()
        store.delay = 4 * committer_module.INLINE_BUDGET  # a slow disk
        await small_commits(committer, 6)
        # The average of small commits passes the budget after a few: the loop stops
        # waiting for the disk itself.
        assert store.on_loop[0] is True
        assert store.on_loop[-1] is False
        assert store.on_loop.count(True) <= 3

    run(tmp_path, body)


def test_acknowledgements_keep_their_order_when_a_small_batch_waits_behind_a_commit(
    tmp_path: Path,
) -> None:
    async def body(store: HeldStore, committer: Committer) -> None:
        seen: list[str] = []
        committer.pending.put_session(SessionRecord("first"))
        committer.after(functools.partial(seen.append, "first"))
        await until(store.started.is_set)  # on the writer thread, held
        # A batch small enough, and waited for enough, to be committed on the loop: it must
        # still be acknowledged after the batch before it.
        for name in "abcd":
            committer.pending.put_session(SessionRecord(name))
            committer.after(functools.partial(seen.append, name))
        store.release.set()
        await until(lambda: len(seen) == 5)
        assert seen == ["first", "a", "b", "c", "d"]
        assert store.on_loop == [False, False]

    run(tmp_path, body)


def test_a_write_due_soon_is_committed_soon_even_behind_a_running_commit(
    tmp_path: Path,
) -> None:
    async def body(store: HeldStore, committer: Committer) -> None:
        loop = asyncio.get_running_loop()
        store.release.set()
        started = loop.time()
        committer.pending.put_session(SessionRecord("lazy"))
        committer.schedule_lazy()  # linger: 30 s
        committer.pending.put_session(SessionRecord("soon"))
        committer.schedule_lazy(0.01)
        await until(lambda: store.batches == [2])
        assert loop.time() - started < 5
        # Behind a running commit: the deadline carries over to the next batch.
        store.release.clear()
        store.started.clear()
        committer.pending.put_session(SessionRecord("held"))
        committer.schedule()
        await until(store.started.is_set)
        committer.pending.put_session(SessionRecord("late"))
        committer.schedule_lazy()
        committer.pending.put_session(SessionRecord("soon too"))
        committer.schedule_lazy(0.01)
        started = loop.time()
        store.release.set()
        await until(lambda: store.batches == [2, 1, 2])
        assert loop.time() - started < 5

    run(tmp_path, body, linger=30.0)


def test_half_of_a_small_read_is_answered_early_while_commits_are_cheap(tmp_path: Path) -> None:
    low, high = committer_module.EARLY_MIN_PACKETS, committer_module.EARLY_MAX_PACKETS
    seen: list[str] = []

    async def body(store: HeldStore, committer: Committer) -> None:
        store.release.set()
        assert [committer.early_answer_point(n) for n in (low - 1, low, high, high + 1)] == [
            0,
            low // 2,
            high // 2,
            0,
        ]
        for name in "abcd":  # the first half of a read: written, waiting for the commit
            committer.pending.put_session(SessionRecord(name))
            committer.after(functools.partial(seen.append, name))
        committer.answer_early()
        assert seen == ["a", "b", "c", "d", "sent"]  # committed on the loop, sent at once
        assert store.on_loop == [True]
        committer.pending.put_session(SessionRecord("e"))  # the second half
        committer.after(functools.partial(seen.append, "e"))
        committer.answer_early()  # a lone acknowledgement: its commit goes to the writer
        assert seen[-1] == "sent"
        await until(lambda: seen[-2:] == ["e", "sent"])

    run(tmp_path, body, send=lambda: seen.append("sent"))


def test_reads_are_answered_whole_once_commits_wait_for_the_disk(tmp_path: Path) -> None:
    async def body(store: HeldStore, committer: Committer) -> None:
        store.release.set()
        store.delay = 2 * committer_module.EARLY_BUDGET  # a disk that flushes
        await small_commits(committer, 8)
        assert committer.early_answer_point(committer_module.EARLY_MIN_PACKETS) == 0

    run(tmp_path, body)
