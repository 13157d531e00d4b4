"""The journal as an Iceberg table: each seq once, across replays, compaction and readers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyiceberg  # noqa: F401  (the lake extra: a missing one fails, never skips)
import pytest

from telemq.pipeline.iceberg_table import IcebergTable
from telemq.pipeline.source import read_journal, stream_journal
from telemq.pipeline.table_format import LakeError
from testsupport.process import free_port

from .helpers import append_journal, frame_rows, journal_rows, telemetry

pytestmark = pytest.mark.spark


def iceberg(spark: Any, lake: Path, query: str = "ingest-test") -> IcebergTable:
    return IcebergTable(spark, str(lake), catalog=None, table=None, query_id=query)


def snapshot_seqs(table: IcebergTable) -> list[int]:
    """The seqs of the current snapshot, read by pyiceberg itself."""
    loaded = table._load(create=False)
    assert loaded is not None
    return sorted(loaded.scan().to_arrow().column("seq").to_pylist())


def duckdb_seqs(table: IcebergTable) -> list[int]:
    """The seqs of the files the current snapshot lists, read by DuckDB."""
    import duckdb

    paths = [f.file_path.removeprefix("file:") for f in table.data_files()]
    rows = duckdb.sql(f"SELECT seq FROM read_parquet({paths!r}) ORDER BY seq").fetchall()
    return [row[0] for row in rows]


def parquet_files(lake: Path) -> list[Path]:
    return sorted((lake / "journal" / "data").rglob("*.parquet"))


def test_a_batch_committed_twice_lands_once(spark: Any, tmp_path: Path) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    records = append_journal(data, telemetry(500), ts_step_us=400_000_000)  # spans 3 dates
    table = iceberg(spark, lake)
    table.check()
    assert not lake.exists(), "check writes nothing"
    frame = read_journal(spark, str(data), options={"rowsPerPartition": 200})
    first = table.commit_batch(frame, 7)
    assert (first.rows, first.first_seq, first.last_seq) == (500, 1, 500)
    again = table.commit_batch(frame, 7)
    assert (again.rows, again.files) == (0, 0)
    assert len(parquet_files(lake)) == first.files, "the replay wrote nothing"

    seqs = [r.seq for r in records]
    assert frame_rows(table.read().collect()) == journal_rows(records)
    assert snapshot_seqs(table) == seqs and duckdb_seqs(table) == seqs
    stats = table.stats()
    assert (stats.rows, stats.files, stats.first_seq, stats.last_seq) == (500, first.files, 1, 500)
    assert stats.dates == ["2024-11-22", "2024-11-23", "2024-11-24"]
    loaded = table._load(create=False)
    assert loaded is not None
    snapshots = loaded.metadata.snapshots
    assert len(snapshots) == 1 and snapshots[0].summary is not None
    summary = snapshots[0].summary
    assert (summary["telemq.query-id"], summary["telemq.batch-id"]) == ("ingest-test", "7")
    dates = sorted(row.date.isoformat() for row in table.read().select("date").distinct().collect())
    assert dates == stats.dates


def test_an_attempt_that_never_committed_is_not_read_and_is_removed(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.table import Transaction

    data, lake = tmp_path / "data", tmp_path / "lake"
    records = append_journal(data, telemetry(300))
    table = iceberg(spark, lake)
    frame = read_journal(spark, str(data), options={"endingSeq": 100})
    table.commit_batch(frame, 0)
    committed = parquet_files(lake)

    def killed(self: Transaction) -> None:
        raise OSError("killed before the commit")

    rest = read_journal(spark, str(data), options={"startingSeq": 101, "endingSeq": 200})
    with monkeypatch.context() as patch:
        patch.setattr(Transaction, "commit_transaction", killed)
        with pytest.raises(OSError, match="killed"):
            table.commit_batch(rest, 1)
        with pytest.raises(OSError, match="killed"):
            table.commit_batch(rest, 2)  # a later batch's attempt too, never run again
    assert len(parquet_files(lake)) > len(committed), "the attempts wrote files"
    assert sorted(r.seq for r in table.read().collect()) == list(range(1, 101))
    assert snapshot_seqs(table) == list(range(1, 101))

    table.commit_batch(rest, 1)  # the replay removes what the crashed attempts left
    assert sorted(r.seq for r in table.read().collect()) == list(range(1, 201))
    assert set(committed) <= set(parquet_files(lake))
    assert len(parquet_files(lake)) == table.stats().files

    # A crashed attempt of a batch that is not replayed (Spark went on with the next one) is
    # left by the next commit and removed by compact once a later batch has committed.
    with monkeypatch.context() as patch:
        patch.setattr(Transaction, "commit_transaction", killed)
        with pytest.raises(OSError, match="killed"):
            table.commit_batch(read_journal(spark, str(data), options={"startingSeq": 201}), 2)
    table.commit_batch(read_journal(spark, str(data), options={"startingSeq": 201}), 3)
    assert len(parquet_files(lake)) > table.stats().files
    attempts = lake / "journal" / "data" / "ingest-test"
    assert [p.name[:12] for p in sorted(attempts.iterdir())] == [f"{b:012d}" for b in (0, 1, 2, 3)]
    summary = table.compact(keep_hours=24)
    assert "0 snapshot(s) expired, 1 unreferenced file(s) removed" in summary, summary
    assert [p.name[:12] for p in sorted(attempts.iterdir())] == [f"{b:012d}" for b in (0, 1, 3)]
    assert snapshot_seqs(table) == [r.seq for r in records]


def test_a_streaming_rerun_from_the_checkpoint(spark: Any, tmp_path: Path) -> None:
    """A real foreachBatch query; its last batch replayed as after a crash between the
    table's commit and Spark's record of it: nothing twice."""
    data, lake, ckpt = tmp_path / "data", tmp_path / "lake", tmp_path / "ckpt"
    records = append_journal(data, telemetry(400))
    table = iceberg(spark, lake, "ingest-stream")

    def run() -> None:
        frame = stream_journal(spark, str(data), options={"maxRowsPerBatch": 150})
        query = (
            frame.writeStream.foreachBatch(table.commit_batch)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    run()
    assert [b.rows for b in table.batches] == [150, 150, 100]
    for name in ("2", ".2.crc"):  # Spark forgets it finished batch 2
        (ckpt / "commits" / name).unlink()
    more = append_journal(data, telemetry(50, seed=3))
    run()
    assert [(b.batch_id, b.rows) for b in table.batches[3:]] == [(2, 0), (3, 50)]
    seqs = [r.seq for r in records + more]
    assert sorted(r.seq for r in table.read().collect()) == seqs
    assert snapshot_seqs(table) == seqs and duckdb_seqs(table) == seqs


def test_compact_during_concurrent_commits(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest commits land between compaction's read and its commit: the compaction is
    retried on the new snapshot, nothing lost or doubled, and the batch markers survive the
    expiry of every snapshot that carried them."""
    import pyiceberg.io.pyarrow as pyiceberg_arrow
    from pyiceberg.table import Transaction

    data, lake = tmp_path / "data", tmp_path / "lake"
    records = append_journal(data, telemetry(600), ts_step_us=200_000_000)
    ingest = iceberg(spark, lake, "ingest-a")
    for batch, first in enumerate(range(1, 401, 100)):
        frame = read_journal(
            spark, str(data), options={"startingSeq": first, "endingSeq": first + 99}
        )
        ingest.commit_batch(frame, batch)
    small = ingest.stats().files
    convert, commit = pyiceberg_arrow.parquet_files_to_data_files, Transaction.commit_transaction
    pending = [(4, 401, 500), (5, 501, 600)]
    calls: list[str] = []

    def another_ingest_commits() -> None:
        batch, first, last = pending.pop(0)
        frame = read_journal(spark, str(data), options={"startingSeq": first, "endingSeq": last})
        iceberg(spark, lake, "ingest-a").commit_batch(frame, batch)  # as another process

    def after_reading(*args: Any, **kwargs: Any) -> Any:
        another_ingest_commits()  # between the compaction's read and its commit
        return convert(*args, **kwargs)

    def racing(self: Transaction) -> Any:
        calls.append("commit")
        if pending and len(calls) == 2:  # the compaction's commit, not the ingest's
            another_ingest_commits()  # the catalog's compare-and-swap then fails
        return commit(self)

    monkeypatch.setattr(pyiceberg_arrow, "parquet_files_to_data_files", after_reading)
    monkeypatch.setattr(Transaction, "commit_transaction", racing)
    summary = iceberg(spark, lake, "compactor").compact(keep_hours=0)
    monkeypatch.undo()
    # ingest 4, the compaction (ingest 5 lands meanwhile: it fails), the compaction again,
    # the expiry
    assert len(calls) == 5
    assert not pending and "snapshot(s) expired" in summary, summary
    assert not summary.startswith("iceberg telemq.journal: 0 file(s)"), summary

    seqs = [r.seq for r in records]
    assert sorted(r.seq for r in ingest.read().collect()) == seqs
    assert snapshot_seqs(ingest) == seqs and duckdb_seqs(ingest) == seqs
    stats = ingest.stats()
    assert stats.rows == 600 and stats.files < small + 2
    loaded = ingest._load(create=False)
    assert loaded is not None and len(loaded.metadata.snapshots) == 1
    assert len(parquet_files(lake)) == stats.files, "rewritten files deleted"
    replay = read_journal(spark, str(data), options={"startingSeq": 501})
    assert ingest.commit_batch(replay, 5).rows == 0 and ingest.stats().rows == 600
    with pytest.raises(LakeError, match="a new checkpoint needs a new query id"):
        ingest.commit_batch(replay, 3)  # a checkpoint older than the table


def test_lakes_that_cannot_be_iceberg_are_one_line_errors(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(lake: Path, *, catalog: str | None = None, table: str | None = None) -> str:
        with pytest.raises(LakeError) as error:
            IcebergTable(spark, str(lake), catalog=catalog, table=table, query_id="q").check()
        message = str(error.value)
        assert "\n" not in message
        return message

    delta = tmp_path / "delta"
    (delta / "journal" / "_delta_log").mkdir(parents=True)
    assert "Delta table" in refused(delta)
    parquet = tmp_path / "parquet"
    (parquet / "journal" / "date=2024-11-22").mkdir(parents=True)
    (parquet / "journal" / "date=2024-11-22" / "batch-000000000000-0000.parquet").write_bytes(b"")
    assert "Parquet journal" in refused(parquet)
    lake = tmp_path / "lake"
    rest = f"http://127.0.0.1:{free_port()}"
    assert refused(lake, catalog=rest).startswith(f"iceberg catalog {rest}: cannot be used")
    nowhere = f"sqlite:///{tmp_path}/missing/dir/catalog.db"
    assert "cannot be used" in refused(lake, catalog=nowhere)
    # A database that does not answer: its password never shows in the line.
    database = f"postgresql+psycopg://telemq:s3cret-pw@127.0.0.1:{free_port()}/lake"
    shown = refused(lake, catalog=database)
    assert shown.startswith("iceberg catalog postgresql+psycopg://telemq:***@127.0.0.1:"), shown
    assert "cannot be used" in shown and "s3cret-pw" not in shown
    assert not lake.exists() and not (tmp_path / "missing").exists()
    with pytest.raises(LakeError, match=r"expected namespace\.name"):
        IcebergTable(spark, str(lake), catalog=None, table="journal", query_id="q")
    with pytest.raises(LakeError, match="not a local path"):
        IcebergTable(spark, "hdfs://nn:8020/lake", catalog=None, table=None, query_id="q")

    # An existing table of another schema, in the lake's own catalog.
    import pyarrow as pa

    other = IcebergTable(spark, str(lake), catalog=None, table=None, query_id="q")
    catalog = other._open_catalog(create=True)
    catalog.create_namespace("telemq")
    catalog.create_table("telemq.journal", schema=pa.schema([("seq", pa.string())]))
    assert "not a journal table" in refused(lake)

    # The table of a shared catalog, made for another lake.
    shared = f"sqlite:///{tmp_path}/shared.db"
    elsewhere = IcebergTable(spark, str(tmp_path / "a"), catalog=shared, table=None, query_id="q")
    assert elsewhere._load(create=True) is not None
    assert "not in lake" in refused(tmp_path / "b", catalog=shared)

    monkeypatch.setitem(sys.modules, "pyiceberg.catalog.sql", None)
    assert "needs pyiceberg" in refused(tmp_path / "fresh")


def test_the_commands_ingest_read_and_compact_an_iceberg_lake(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--format iceberg` through the command line: ingest twice (the second adds nothing),
    compact with the format found in the lake, and a reader (no query id) sees each seq."""
    from telemq.cli.main import main

    data, lake = tmp_path / "data", tmp_path / "lake"
    records = append_journal(data, telemetry(300), ts_step_us=400_000_000)
    ingest = ["pipeline", "ingest", "-d", str(data), "-l", str(lake), "--format", "iceberg"]
    assert main([*ingest, "--max-rows-per-batch", "100", "-q"]) == 0
    assert main([*ingest, "-q"]) == 0
    out = capsys.readouterr().out
    assert "ingested 300 rows" in out and "ingested 0 rows" in out, out
    assert main(["pipeline", "compact", "-l", str(lake), "--keep-hours", "0", "-q"]) == 0
    reader = IcebergTable(spark, str(lake), catalog=None, table=None, query_id=None)
    assert sorted(r.seq for r in reader.read().select("seq").collect()) == [r.seq for r in records]
    with pytest.raises(LakeError, match="opened to read"):
        reader.commit_batch(read_journal(spark, str(data)), 1)
