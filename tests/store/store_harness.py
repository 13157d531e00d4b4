"""The store-under-test harness shared by the store test modules."""

from __future__ import annotations

from pathlib import Path

from telemq.store import MemoryStore, SqliteStore, Store, SyncMode


class Harness:
    """Owns the store under test; `reopen()` simulates a broker restart. `dsn`: the
    database of a "postgres" store (a test database of `tests/testsupport/postgres.py`)."""

    def __init__(self, kind: str, path: Path, dsn: str = "") -> None:
        self.kind = kind
        self.path = path
        self.dsn = dsn
        self.store: Store = self._open(None)

    def _open(self, previous: Store | None) -> Store:
        if self.kind == "sqlite":
            return SqliteStore(self.path, SyncMode.NORMAL)
        if self.kind == "postgres":
            from telemq.store.postgres import PostgresStore

            return PostgresStore(self.dsn, SyncMode.NORMAL)
        if isinstance(previous, MemoryStore):
            return previous.reopen()
        return MemoryStore()

    def reopen(self) -> Store:
        self.store.close()
        self.store = self._open(self.store)
        return self.store
