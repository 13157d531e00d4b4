"""The Delta Lake journal table: each seq once, read by delta-rs, DuckDB and Spark, also when a
batch runs twice, when a batch dies before its commit, and while compact rewrites the table."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import deltalake
import duckdb
import pytest

from telemq.cli.main import main
from telemq.pipeline import ingest
from telemq.pipeline.aggregate import run_aggregate
from telemq.pipeline.delta_table import DeltaLakeTable
from telemq.pipeline.ingest import consumer_name, run_ingest
from telemq.pipeline.source import read_journal
from telemq.pipeline.table_format import LakeError, open_table

from .helpers import Pub, append_journal, telemetry

pytestmark = pytest.mark.spark


def delta_seqs(lake: Path) -> list[int]:
    """Every seq of the table's current version, read by delta-rs (no Spark)."""
    table = deltalake.DeltaTable(str(lake / "journal"))
    return sorted(table.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist())


def test_ingest_into_delta_once_and_read_back_everywhere(spark: Any, tmp_path: Path) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    records = append_journal(data, telemetry(400), ts_step_us=300_000_000)  # spans 2 days
    first = run_ingest(spark, data, lake, table_format="delta", max_rows_per_batch=200)
    assert (first.rows, len(first.batches), first.lake_stats.rows) == (400, 2, 400)
    assert (first.lake_stats.first_seq, first.lake_stats.last_seq) == (1, 400)
    assert len(first.lake_stats.dates) == 2
    assert delta_seqs(lake) == [r.seq for r in records]
    table = deltalake.DeltaTable(str(lake / "journal"))
    app = consumer_name(lake / "_checkpoints" / "ingest")
    assert table.transaction_version(app) == 1 and table.metadata().partition_columns == ["date"]
    # DuckDB over the files the version lists (hive partitions give the date).
    [(seqs, dates, payloads)] = duckdb.sql(
        f"SELECT count(DISTINCT seq), count(DISTINCT date), count(payload)"
        f" FROM read_parquet({table.file_uris()!r}, hive_partitioning = true)"
    ).fetchall()
    assert (seqs, dates, payloads) == (400, 2, 400)

    # Run again from the checkpoint: only the new rows, in one more version.
    more = append_journal(data, telemetry(50, seed=3))
    again = run_ingest(spark, data, lake, table_format="delta")
    assert again.rows == 50 and delta_seqs(lake) == [r.seq for r in records + more]
    # Spark loses its record that batch 2 is done (a kill after the Delta commit, before
    # Spark's): the rerun replays batch 2, which adds nothing.
    version = deltalake.DeltaTable(str(lake / "journal")).version()
    commits = lake / "_checkpoints" / "ingest" / "spark" / "commits"
    for name in ("2", ".2.crc"):  # the file and Hadoop's checksum beside it
        (commits / name).unlink()
    replayed = run_ingest(spark, data, lake, table_format="delta")
    assert [(b.batch_id, b.rows) for b in replayed.batches] == [(2, 0)]
    assert deltalake.DeltaTable(str(lake / "journal")).version() == version

    # The same batch committed twice (Spark replaying it) adds nothing the second time.
    writer = DeltaLakeTable(spark, lake, query_id=app)
    frame = read_journal(spark, str(data), options={"startingSeq": 1, "endingSeq": 10})
    repeat = writer.commit_batch(frame, 2)  # batch 2 is the rerun's, already committed
    assert (repeat.rows, repeat.files) == (0, 0)
    listed = deltalake.DeltaTable(str(lake / "journal"))
    assert listed.version() == version
    assert len(list((lake / "journal").glob("date=*/*.parquet"))) == len(listed.file_uris())

    # Readers through the seam: aggregate reads the Delta version, not every file.
    summary = run_aggregate(spark, lake, "1h")
    assert summary.input_rows == 450


def test_a_batch_that_never_committed_is_not_read_and_is_removed(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    records = append_journal(data, telemetry(300))
    frame = read_journal(spark, str(data), options={"rowsPerPartition": 100})
    dying = DeltaLakeTable(spark, lake, query_id="ingest-test")
    dying.commit_batch(read_journal(spark, str(data), options={"endingSeq": 5}), 0)

    def killed(*args: Any) -> None:
        raise KeyboardInterrupt("killed between the rename and the commit")

    monkeypatch.setattr(dying, "_commit", killed)
    with pytest.raises(KeyboardInterrupt):
        dying.commit_batch(frame, 1)
    orphans = list((lake / "journal").glob("date=*/ingest-test-000000000001-*.parquet"))
    assert orphans
    assert delta_seqs(lake) == [1, 2, 3, 4, 5]  # never read

    rerun = DeltaLakeTable(spark, lake, query_id="ingest-test")
    stats = rerun.commit_batch(frame, 1)
    assert stats.rows == 300 and not any(f.exists() for f in orphans)
    assert delta_seqs(lake) == sorted([1, 2, 3, 4, 5, *(r.seq for r in records)])
    assert len(list((lake / "journal").glob("date=*/*.parquet"))) == 1 + len(orphans)

    # Compact deletes the files of a batch that can never commit: a replay of batch 2 that
    # read the log before another run committed batch 3, and died before its own commit
    # would have found batch 2 done. It keeps those of the batch after the last committed
    # one, which may be a live ingest's about to commit.
    more = append_journal(data, telemetry(20, seed=1))
    tail = read_journal(spark, str(data), options={"startingSeq": more[0].seq})
    rerun.commit_batch(tail, 3)
    monkeypatch.setattr(rerun, "_commit", killed)
    monkeypatch.setattr(rerun, "committed_batch", lambda: 1)  # read before batch 3's commit
    for batch in (2, 4):
        with pytest.raises(KeyboardInterrupt):
            rerun.commit_batch(tail, batch)
    journal = lake / "journal"
    abandoned = list(journal.glob("date=*/ingest-test-000000000002-*.parquet"))
    pending = list(journal.glob("date=*/ingest-test-000000000004-*.parquet"))
    assert abandoned and pending
    summary = DeltaLakeTable(spark, lake).compact(keep_hours=0)
    assert summary.endswith(f"and {len(abandoned)} file(s) of batches that never committed")
    assert not any(f.exists() for f in abandoned) and all(f.exists() for f in pending)
    assert delta_seqs(lake) == sorted([1, 2, 3, 4, 5, *(r.seq for r in records + more)])


def test_merge_schema_adds_a_field_inside_a_struct(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Delta's schema gains the nested field too, so every Delta reader sees it."""
    data, lake = tmp_path / "data", tmp_path / "lake"

    def readings(floors: bool) -> list[Pub]:
        sites = [{"room": f"r{i}", **({"floor": i} if floors else {})} for i in range(3)]
        return [Pub(f"plant/{i}", json.dumps({"site": s}).encode()) for i, s in enumerate(sites)]

    ingest = ["pipeline", "ingest", "-d", str(data), "-l", str(lake), "--format", "delta", "-q"]
    append_journal(data, readings(False))
    assert main([*ingest, "--schema", "site STRUCT<room: STRING>"]) == 0
    append_journal(data, readings(True))
    wider = "site STRUCT<room: STRING, floor: INT>"
    assert main([*ingest, "--schema", wider]) == 2
    assert "adds nested fields: give --merge-schema" in capsys.readouterr().err
    assert main([*ingest, "--schema", wider, "--merge-schema"]) == 0
    table = deltalake.DeltaTable(str(lake / "journal"))
    site = next(f for f in table.schema().fields if f.name == "site")
    assert [f.name for f in site.type.fields] == ["room", "floor"]
    rows = sorted(
        table.to_pyarrow_table(columns=["seq", "site"]).to_pylist(), key=lambda r: r["seq"]
    )
    assert [r["site"] for r in rows] == [
        *({"room": f"r{i}", "floor": None} for i in range(3)),
        *({"room": f"r{i}", "floor": i} for i in range(3)),
    ]
    versions = table.version()
    assert main([*ingest, "--schema", wider]) == 0  # nothing new: no schema commit
    assert deltalake.DeltaTable(str(lake / "journal")).version() == versions


def test_another_format_at_the_lake_is_one_line(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    append_journal(data, telemetry(20))
    source = ["pipeline", "ingest", "-d", str(data), "-l", str(lake), "-q"]
    assert main([*source, "--format", "parquet"]) == 0
    capsys.readouterr()
    before = sorted(p.relative_to(lake) for p in lake.rglob("*"))
    code = main([*source, "--format", "delta"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "is a parquet table, not delta: give --format parquet" in err
    assert sorted(p.relative_to(lake) for p in lake.rglob("*")) == before  # nothing written
    with pytest.raises(LakeError, match="is a parquet table, not delta"):
        open_table("delta", spark, lake, query_id="x").check()


def test_missing_deltalake_names_the_extra(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "deltalake", None)
    with pytest.raises(LakeError, match=r"telemq\[lake\]"):
        open_table("delta", spark, tmp_path / "lake", query_id="x")


def test_compact_while_ingest_writes_keeps_each_seq_once(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    records = append_journal(data, telemetry(200))
    stop = threading.Event()
    outcome: list[Any] = []

    def ingesting() -> None:
        try:
            outcome.append(
                run_ingest(
                    spark, data, lake, table_format="delta", continuous=True,
                    trigger_seconds=0.2, max_rows_per_batch=40, stop=stop,
                )
            )  # fmt: skip
        except BaseException as error:
            outcome.append(error)

    job = threading.Thread(target=ingesting, name="test-ingest")
    job.start()
    table = DeltaLakeTable(spark, lake)
    summaries = []
    try:
        for round_ in range(3):
            records += append_journal(data, telemetry(120, seed=round_))
            # Compact once part of the new rows is in: ingest keeps committing meanwhile.
            while table.stats().rows < len(records) - 100:
                assert job.is_alive(), outcome
                stop.wait(0.1)
            summaries.append(table.compact(keep_hours=0))
    finally:
        stop.set()
        job.join(240)
    assert not job.is_alive() and isinstance(outcome[0], ingest.IngestResult), outcome
    assert any(s.startswith("compacted ") and "into 1" in s for s in summaries), summaries
    assert delta_seqs(lake) == [r.seq for r in records]
    assert sorted(r.seq for r in table.read().select("seq").collect()) == delta_seqs(lake)
    # The command: the format found in the lake, the old files deleted at once.
    capsys.readouterr()
    assert main(["pipeline", "compact", "-l", str(lake), "--keep-hours", "0", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("compacted ") and f"table: {len(records):,} rows in 1 file(s)" in out
    assert len(list((lake / "journal").glob("date=*/*.parquet"))) == 1
    assert delta_seqs(lake) == [r.seq for r in records]
