"""The store-under-test harness shared by the store test modules."""

from __future__ import annotations

from pathlib import Path

from telemq.store import MemoryStore, SqliteStore, Store, SyncMode


class Harness:
    """Owns the store under test; `reopen()` simulates a broker restart."""

    def __init__(self, kind: str, path: Path) -> None:
        self.kind = kind
        self.path = path
        self.store: Store = self._open(None)

    def _open(self, previous: Store | None) -> Store:
        if self.kind == "sqlite":
            return SqliteStore(self.path, SyncMode.NORMAL)
        if isinstance(previous, MemoryStore):
            return previous.reopen()
        return MemoryStore()

    def reopen(self) -> Store:
        self.store.close()
        self.store = self._open(self.store)
        return self.store
