"""A SQLite store for in-process brokers whose commits wait while `release` is clear: a disk
that is slow exactly when a test says so (the committer's and the back-pressure's tests)."""

from __future__ import annotations

import threading
from pathlib import Path

from telemq.store import SqliteStore, SyncMode, WriteBatch

HOLD_LIMIT = 30.0  # seconds a commit may be held before the test fails


class HeldStore(SqliteStore):
    """Commits wait while `release` is clear; `holding` is set once one waits."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, SyncMode.NORMAL)
        self.release = threading.Event()
        self.release.set()
        self.holding = threading.Event()

    def commit(self, batch: WriteBatch) -> None:
        if not self.release.is_set():
            self.holding.set()
            assert self.release.wait(HOLD_LIMIT), "commit held too long"
        super().commit(batch)
