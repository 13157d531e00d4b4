"""`PostgresJournalReader` answers as `JournalReader` does for the same journal.

The same batches are committed to a SQLite store and a PostgreSQL store; every reader call,
and the Arrow record batches the journal service streams (`journal.arrow.read_range`), must
be equal: packed ranges (with and without properties, gaps, unicode, empty text), rows,
seqs, bounds after a trim, and the subscriptions.
"""

from __future__ import annotations

from pathlib import Path

from telemq.journal.arrow import read_range
from telemq.store import (
    JournalReader,
    JournalReading,
    JournalRecord,
    PostgresLocation,
    SqliteStore,
    Store,
    SubscriptionRecord,
    SyncMode,
    WriteBatch,
    open_reader,
)
from telemq.store.postgres import PostgresStore

PROPS = b"\x03\x00\x03a/b" + b"\x26\x00\x01k\x00\x01v"


def record(seq: int) -> JournalRecord:
    topic = ["t/a", "ü/ß/😀", "", "日本"][seq % 4] or "x"
    return JournalRecord(
        seq,
        1_000 + seq,
        topic,
        "" if seq % 3 else "sp",
        seq % 3,
        seq % 2 == 0,
        bytes(range(seq % 7)) * seq,
        f"client-{seq % 5}",
        "" if seq % 2 else "user",
        PROPS if seq % 4 == 1 else b"",
        "" if seq % 5 else "hub",
    )


def fill(store: Store) -> None:
    batch = WriteBatch()
    for seq in [*range(1, 300), *range(310, 400)]:  # a gap
        batch.append_journal(record(seq))
    batch.put_subscription(SubscriptionRecord("queue", "a/#", {"qos": 1}))
    batch.put_subscription(SubscriptionRecord("other", "b/+"))
    store.commit(batch)


def test_the_readers_agree(tmp_path: Path, postgres_dsn: str) -> None:
    sqlite = SqliteStore(tmp_path / "telemq.db", SyncMode.OFF, origin="edge")
    postgres = PostgresStore(postgres_dsn, SyncMode.OFF, origin="edge")
    try:
        for store in (sqlite, postgres):
            fill(store)
            store.trim_journal(5)
        with (
            JournalReader(tmp_path) as lite,
            open_reader(PostgresLocation(postgres_dsn)) as pg,
        ):
            assert pg.packed_in_order and lite.packed_in_order
            assert pg.bounds() == lite.bounds() == (5, 399)
            for first, last in [(1, 4), (5, 5), (5, 50), (280, 330), (300, 309), (1, 1000)]:
                assert pg.packed(first, last) == lite.packed(first, last), (first, last)
                assert pg.rows(first, last) == lite.rows(first, last)
                assert pg.seqs(first, last) == lite.seqs(first, last)
                ours = list(read_range(pg, first, last, chunk_rows=64))
                theirs = list(read_range(lite, first, last, chunk_rows=64))
                assert [b.to_pylist() for b in ours] == [b.to_pylist() for b in theirs]

            def names(reader: JournalReading) -> list[tuple[str, str, str]]:
                return sorted((r.client_id, r.key, r.data) for r in reader.subscriptions())

            assert names(pg) == names(lite) and len(names(pg)) == 2
    finally:
        sqlite.close()
        postgres.close()
