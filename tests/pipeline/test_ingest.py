"""`telemq pipeline ingest` into a Parquet lake (``--format parquet``): each seq lands in the
lake exactly once, also across a kill. The Delta table's own tests are in test_delta.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from telemq.cli.main import main
from telemq.pipeline import ingest, parquet_table
from telemq.pipeline.ingest import BatchCommitter, consumer_name, journal_table, lake_stats
from telemq.pipeline.lakefs import LakeFileSystem
from telemq.pipeline.location import locate
from telemq.pipeline.source import read_journal
from telemq.store import consumers

from .helpers import append_journal, journal_rows, telemetry

pytestmark = pytest.mark.spark


def lake_seqs(lake: Path) -> list[int]:
    """Every seq in the lake's journal table, read by plain pyarrow (no Spark metadata)."""
    files = sorted(journal_table(lake).glob("date=*/*.parquet"))
    return sorted(s for f in files for s in pq.read_table(f, columns=["seq"]).column(0).to_pylist())


def test_ingest_is_exactly_once_across_a_killed_run(spark: Any, tmp_path: Path) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    records = append_journal(data, telemetry(3000), ts_step_us=40_000_000)  # spans 2 days
    command = [
        sys.executable, "-m", "telemq", "pipeline", "ingest", "--data-dir", str(data),
        "--lake", str(lake), "--format", "parquet", "--continuous", "--trigger", "0.1",
        "--max-rows-per-batch", "60",
        "--master", "local[1]", "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    # In tmp_path: the job writes the JVM's log to ./telemq-spark.log.
    job = subprocess.Popen(
        command, env=env, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while len(list(journal_table(lake).glob("date=*/*.parquet"))) < 4:
            assert job.poll() is None, job.stderr.read().decode() if job.stderr else ""
            assert time.monotonic() < deadline, "the ingest job wrote nothing in time"
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the job, its JVM and its Python workers
        job.wait()
    before = lake_seqs(lake)
    assert 0 < len(before) < 3000, "the kill must land mid-run"
    assert len(before) == len(set(before))

    rerun = ["pipeline", "ingest", "-d", str(data), "-l", str(lake), "--format", "parquet", "-q"]
    assert main([*rerun, "--once"]) == 0
    assert lake_seqs(lake) == [r.seq for r in records]
    stats = lake_stats(LakeFileSystem.for_uri(spark, str(lake)), lake)
    assert stats.rows == 3000 and (stats.first_seq, stats.last_seq) == (1, 3000)
    assert len(stats.dates) == 2
    assert not list(lake.rglob("_spark_metadata"))
    assert not list((lake / "_staging").glob("*/*"))
    # The whole table through pyarrow's dataset reader (hive partitions), columns intact.
    table = pq.read_table(journal_table(lake))
    assert sorted(table.column("seq").to_pylist()) == list(range(1, 3001))
    # The job marked its consumer record stopped at the last committed seq.
    ckpt = lake / "_checkpoints" / "ingest"
    record = {r.consumer: r for r in consumers.read_records(data)}[consumer_name(ckpt)]
    assert record.running is False and record.committed_seq == 3000

    more = append_journal(data, telemetry(100, seed=5))
    assert main(rerun) == 0
    assert lake_seqs(lake) == [r.seq for r in records + more]


def test_a_stop_ends_the_ingest_while_the_journal_keeps_growing(spark: Any, tmp_path: Path) -> None:
    """Asked to stop, a continuous ingest commits what the journal held at that moment and
    returns, though rows keep coming (as they do while a broker serves publishers): it does
    not wait for a trigger that finds nothing new."""
    data, lake = tmp_path / "data", tmp_path / "lake"
    append_journal(data, telemetry(50))
    stop, quiet, batches = threading.Event(), threading.Event(), threading.Semaphore(0)

    def keep_appending() -> None:
        seed = 2
        while not quiet.wait(0.02):
            append_journal(data, telemetry(10, seed=seed))
            seed += 1

    def run() -> None:
        ingest.run_ingest(
            spark, data, lake, continuous=True, trigger_seconds=0.1, stop=stop,
            table_format="parquet", progress=lambda line: batches.release(),
        )  # fmt: skip

    writer = threading.Thread(target=keep_appending)
    job = threading.Thread(target=run)
    writer.start()
    job.start()
    try:
        for _ in range(2):  # the query runs and the journal grows under it
            assert batches.acquire(timeout=120), "the ingest committed nothing in time"
        at_stop = locate(str(data)).bounds()[1]
        stop.set()
        job.join(120)
        stopped = not job.is_alive()
    finally:
        quiet.set()
        writer.join()
        stop.set()
        job.join()
    assert stopped, "the ingest kept running after the stop while the journal grew"
    seqs = lake_seqs(lake)
    assert seqs == list(range(1, len(seqs) + 1))  # each once, none skipped
    assert seqs[-1] >= at_stop


def test_a_batch_committed_twice_lands_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, table = tmp_path / "data", tmp_path / "lake" / "journal"
    # Spark's executors write it (not the driver, as for a batch this small): three files.
    monkeypatch.setattr(parquet_table, "DRIVER_WRITE_MAX_ROWS", 0)
    records = append_journal(data, telemetry(500))
    fs = LakeFileSystem.for_uri(spark, str(tmp_path))
    committer = BatchCommitter(fs, f"file:{table}", f"file:{tmp_path / 'staging'}")
    frame = read_journal(spark, str(data), options={"rowsPerPartition": 200})
    committer(frame, 7)
    # A crash mid-move leaves some of the batch's files; the replay replaces them.
    first = sorted(table.glob("date=*/*.parquet"))
    assert len(first) == 3 and all(f.name.startswith("batch-000000000007-") for f in first)
    fs.delete(str(first[0]))
    committer(frame, 7)
    assert lake_seqs(tmp_path / "lake") == [r.seq for r in records]
    assert [b.rows for b in committer.batches] == [500, 500]
    rows = pq.read_table(table).to_pylist()
    assert sorted((r["seq"], r["topic"], r["payload"]) for r in rows) == [
        (r[0], r[2], r[6]) for r in journal_rows(records)
    ]


def test_a_failed_query_is_one_line_naming_the_cause(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store vanishing after the checks (here: the checks skipped) fails the streaming
    query inside Spark; the error names the source's own exception, not Spark's wrapping."""
    monkeypatch.setattr(ingest, "check_ingest", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError) as failure:
        ingest.run_ingest(spark, tmp_path / "gone", tmp_path / "lake")
    message = str(failure.value)
    assert message.startswith("ingest failed: ") and "\n" not in message, message
    assert "StoreError: no store file at" in message, message


def test_lake_and_checkpoint_as_hadoop_uris(spark: Any, tmp_path: Path) -> None:
    """``file://`` URIs take the same path as ``hdfs://`` or ``s3a://`` ones: Spark writes
    there, and the commit protocol renames through Hadoop's FileSystem, not Python's ``os``."""
    from telemq.pipeline.aggregate import run_aggregate

    data, lake, ckpt = tmp_path / "data", tmp_path / "lake", tmp_path / "elsewhere" / "ckpt"
    records = append_journal(data, telemetry(800), ts_step_us=200_000_000)
    result = ingest.run_ingest(
        spark, data, f"file://{lake}", checkpoint=f"file://{ckpt}", max_rows_per_batch=300,
        table_format="parquet",
    )  # fmt: skip
    assert (result.rows, result.lake_stats.rows, len(result.batches)) == (800, 800, 3)
    assert (result.lake, result.checkpoint) == (f"file://{lake}", f"file://{ckpt}")
    assert lake_seqs(lake) == [r.seq for r in records]
    assert (ckpt / "spark" / "commits").is_dir() and not list((lake / "_staging").glob("*/*"))
    again = ingest.run_ingest(
        spark, data, f"file://{lake}", checkpoint=f"file://{ckpt}", table_format="parquet"
    )
    assert again.rows == 0 and again.lake_stats.rows == 800
    summary = run_aggregate(spark, f"file://{lake}", "1h")
    assert summary.input_rows == 800 and summary.table.endswith("/aggregates/1h")
    assert pq.read_table(lake / "aggregates" / "1h").num_rows == summary.rows
