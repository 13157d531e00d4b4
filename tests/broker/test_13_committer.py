"""The group committer against a real SQLite store and writer thread.

A store whose commits can be held open stands in for a slow disk, so the tests see
what happens while a commit runs: the next batch, the order of acknowledgements, the
backlog bound that pauses readers, the sealing of journal rows.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from telemq.broker import committer as committer_module
from telemq.broker.committer import Committer
from telemq.store import SessionRecord, SqliteStore, SyncMode, WriteBatch
from telemq.store.base import JOURNAL_CHUNK_ROWS


class HeldStore(SqliteStore):
    """Commits wait for `release` (set: they go straight through)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, SyncMode.NORMAL)
        self.release = threading.Event()
        self.started = threading.Event()
        self.batches: list[int] = []

    def commit(self, batch: WriteBatch) -> None:
        self.started.set()
        assert self.release.wait(10), "commit held too long"
        self.batches.append(len(batch))
        super().commit(batch)


def row(seq: int) -> tuple[int, int, str, str, int, bool, bytes, str, str]:
    return (seq, seq, "t", "", 0, False, b"p", "c", "")


async def until(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.002)


def run(tmp_path: Path, body: object) -> None:
    store = HeldStore(tmp_path / "telemq.db")
    store.load()
    executor = ThreadPoolExecutor(1)

    async def main() -> None:
        failures: list[BaseException] = []
        committer = Committer(store, asyncio.get_running_loop(), executor, failures.append)
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
        assert len(committer.pending.journal) == 5 * 9
        store.release.set()
        await committer.drain()
        assert store.stats().journal_rows == JOURNAL_CHUNK_ROWS + 5

    run(tmp_path, body)
