"""The journal reader and the consumer records, without Spark."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from telemq.filters import compile_filter
from telemq.journal.arrow import JOURNAL_SCHEMA, TopicMatcher
from telemq.pipeline.journal import parse_topics, read_filtered, split_range
from telemq.protocol import topic_matches
from telemq.store import ConsumerOffset, JournalReader, JournalRecord, SqliteStore, consumers

from .helpers import Pub, append_journal, journal_rows, telemetry


def _read(data: Path, first: int, last: int, **kwargs: object) -> list[tuple[object, ...]]:
    with JournalReader(data) as reader:
        batches = list(read_filtered(reader, first, last, **kwargs))  # type: ignore[arg-type]
    assert all(b.schema.equals(JOURNAL_SCHEMA) for b in batches)
    rows: list[tuple[object, ...]] = []
    for batch in batches:
        columns = [batch.column(i) for i in range(batch.num_columns)]
        columns[1] = columns[1].cast(pa.int64())  # ts in UTC microseconds
        rows += zip(*(c.to_pylist() for c in columns), strict=True)
    return rows


def plain_rows(records: Sequence[JournalRecord]) -> list[tuple[object, ...]]:
    """Rows of records without properties: `content_type` and `user_properties` NULL; then
    `broker`, NULL for a row without an origin."""
    return [
        (*row, None, None, record.origin or None)
        for row, record in zip(journal_rows(records), records, strict=True)
    ]


def test_read_range_equals_the_store(tmp_path: Path) -> None:
    records = append_journal(tmp_path, telemetry(3000))
    # Chunk sizes that do and do not divide the range; the first chunk is always small.
    for chunk in (7, 1000, 50_000):
        assert _read(tmp_path, 1, 3000, chunk_rows=chunk) == plain_rows(records)
    assert _read(tmp_path, 100, 199) == plain_rows(records[99:199])
    assert _read(tmp_path, 5000, 6000) == []


def test_odd_values_take_the_row_path_and_stay_exact(tmp_path: Path) -> None:
    pubs = [
        Pub("a/b", b"x\x00y", client_id="nul\x00inside"),  # U+0000 in a text column
        Pub("a/é/ü", "ünïcode".encode(), user_id="ü"),
        Pub("a", b"", sub_point="sp"),
        Pub("b", bytes(range(256)) * 10, qos=2, retain=True),
    ]
    records = append_journal(tmp_path, pubs)
    assert _read(tmp_path, 1, 4) == plain_rows(records)


def test_gaps_in_seq_are_read_as_they_are(tmp_path: Path) -> None:
    records = append_journal(tmp_path, telemetry(50))
    store = SqliteStore(tmp_path / "telemq.db", "off")
    store.load()
    store.trim_journal(11)  # seq 1..10 go: the range starts later
    store.close()
    raw = sqlite3.connect(tmp_path / "telemq.db")  # and a gap in the middle, by hand
    raw.execute("DELETE FROM journal WHERE seq = 30")
    raw.commit()
    raw.close()
    expected = [r for r in plain_rows(records) if r[0] > 10 and r[0] != 30]
    assert _read(tmp_path, 1, 50) == expected
    with JournalReader(tmp_path) as reader:
        assert reader.bounds() == (11, 50)


def test_bounds_of_an_empty_or_trimmed_journal(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "telemq.db", "off")
    store.load()
    store.close()
    with JournalReader(tmp_path) as reader:
        assert reader.bounds() == (1, 0)
    append_journal(tmp_path, telemetry(20))
    store = SqliteStore(tmp_path / "telemq.db", "off")
    store.load()
    store.trim_journal(21)
    store.close()
    with JournalReader(tmp_path) as reader:
        assert reader.bounds() == (21, 20)  # the last seq survives the trim


def test_topic_matcher_and_filter_in_the_reader(tmp_path: Path) -> None:
    pubs = [*telemetry(400, topics=7), Pub("$SYS/x", b"{}"), Pub("sensors", b'{"temp": 99}')]
    records = append_journal(tmp_path, pubs)
    filters = ["sensors/room1/#", "+/room3/+", "sensors/#"]
    for f in filters:
        got = _read(tmp_path, 1, 10_000, topics=TopicMatcher([f]))
        assert got == [r for r in plain_rows(records) if topic_matches(f, r[2])]
    flt = compile_filter("temp > 30 AND Properties.QoS <> 1 OR Properties.ClientId = 'dev2'")
    got = _read(tmp_path, 1, 10_000, flt=flt)
    expected = [
        r for r in plain_rows(records) if flt.matches(r[6], {"QoS": r[4], "ClientId": r[7]})
    ]
    assert got == expected and 0 < len(expected) < len(records)


def test_split_and_parse_helpers() -> None:
    assert split_range(1, 10, 4) == [(1, 4), (5, 8), (9, 10)]
    assert split_range(5, 4, 4) == []
    assert parse_topics("a/#, b/+") == ("a/#", "b/+")
    assert parse_topics(json.dumps(["a,b", "c"])) == ("a,b", "c")
    assert parse_topics(None) == ()
    with pytest.raises(ValueError, match="topics"):
        parse_topics("a/#/b")


def test_consumer_records_and_retention_floor(tmp_path: Path) -> None:
    assert consumers.retention_floor(tmp_path) is None
    consumers.write_record(tmp_path, consumers.ConsumerRecord("ingest-a", None))
    assert consumers.retention_floor(tmp_path) == 0  # started, position unknown: keep all
    consumers.write_record(tmp_path, consumers.ConsumerRecord("ingest-a", 120))
    consumers.write_record(tmp_path, consumers.ConsumerRecord("b/c", 80))
    assert consumers.retention_floor(tmp_path) == 80
    consumers.write_record(tmp_path, consumers.ConsumerRecord("b/c", 80, running=False))
    assert consumers.retention_floor(tmp_path) == 120
    assert consumers.retention_floor(tmp_path, include_stopped=True) == 80
    (tmp_path / consumers.COMMITS_DIR / "junk.json").write_text("{")
    names = sorted(r.consumer for r in consumers.read_records(tmp_path))
    assert names == ["b/c", "ingest-a"]
    consumers.remove_record(tmp_path, "ingest-a")
    assert consumers.retention_floor(tmp_path) is None


def test_the_floor_of_offsets_kept_by_the_broker() -> None:
    now = 1_000_000_000_000
    stale = now - int(consumers.STALE_AFTER_S * 1_000_000) - 1

    def offset(seq: int | None, running: bool = True, at: int = now) -> ConsumerOffset:
        return ConsumerOffset("q", "", seq, running, at)

    assert consumers.offsets_floor([], now) is None
    assert consumers.offsets_floor([offset(None)], now) == 0  # not committed yet: keep all
    assert consumers.offsets_floor([offset(120), offset(80)], now) == 80
    # Stopped, or silent for longer than STALE_AFTER_S: no longer holds retention back.
    assert consumers.offsets_floor([offset(120), offset(80, running=False)], now) == 120
    assert consumers.offsets_floor([offset(120), offset(5, at=stale)], now) == 120
    assert consumers.offsets_floor([offset(5, at=stale)], now) is None


def test_a_journal_older_than_origins_reads_null_brokers(tmp_path: Path) -> None:
    """Rows written before store schema 6 have no origin: `broker` is NULL for them, on
    both read paths, before and after a broker adds the column."""
    records = append_journal(tmp_path, telemetry(20))
    conn = sqlite3.connect(tmp_path / "telemq.db")
    conn.executescript("ALTER TABLE journal DROP COLUMN origin; PRAGMA user_version = 5;")
    conn.close()
    old = [(*row[:-1], None) for row in plain_rows(records)]
    for chunk in (7, 50_000):
        assert _read(tmp_path, 1, 20, chunk_rows=chunk) == old  # no column at all
    records += append_journal(tmp_path, [Pub("a/new", b"{}", origin="edge-1")])
    with JournalReader(tmp_path) as reader:
        assert [row[10] for row in reader.rows(19, 21)] == [None, None, "edge-1"]
    assert _read(tmp_path, 1, 21) == [*old, *plain_rows(records[20:])]
    odd = [Pub("b", b"x\x00y", client_id="nul\x00inside")]  # the row path
    records += append_journal(tmp_path, odd)
    assert _read(tmp_path, 20, 22) == [old[19], *plain_rows(records[20:])]
