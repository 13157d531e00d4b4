"""The data source over the journal service (option ``journal``), on a real local Spark.

A broker subprocess serves a journal over HTTP with users and ACL rules; Spark reads it as
executors would on other hosts (`local[2]`: tasks fetch their own seq ranges over HTTP). Batch
and stream reads give the same rows as the store file; the jobs take the URL (API and
``--journal``); the offsets of streaming queries are kept by the broker, not in files of
its data directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from telemq.journal.client import JournalClient
from telemq.pipeline.ingest import consumer_name, journal_table, run_ingest
from telemq.pipeline.source import read_journal
from telemq.store import consumers
from testsupport.process import users_and_acl

from .helpers import frame_rows, journal_service, run_stream, telemetry

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

PASSWORDS = {"spark": "spark-pw-1", "room1": "room1-pw-2"}
ACL = [("spark", "journal", "#", True), ("room1", "journal", "sensors/room1/#", True)]
SPARK = {"user": "spark", "password": PASSWORDS["spark"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, list[Any]]]:
    workdir = tmp_path_factory.mktemp("network-source")
    pubs = telemetry(2500)
    config = users_and_acl(PASSWORDS, ACL)
    with journal_service(workdir, pubs, config_text=config, ts_step_us=40_000_000) as (b, url):
        records = journal_rows_of(b.data_dir)
        yield b.data_dir, url, records


def journal_rows_of(data: Path) -> list[Any]:
    from telemq.store import JournalReader

    with JournalReader(data) as reader:
        return reader.rows(1, 10**9)


def test_batch_reads_over_the_network_equal_the_store_file(
    spark: Any, served: tuple[Path, str, list[Any]]
) -> None:
    data, url, rows = served
    over_http = read_journal(spark, url, options={**SPARK, "rowsPerPartition": 600})
    assert over_http.rdd.getNumPartitions() == 5  # each task fetches its own range
    assert frame_rows(over_http.collect()) == frame_rows(read_journal(spark, str(data)).collect())
    assert len(rows) == 2500
    # The plain format, a range, topics and the filter option (Python evaluator on executors).
    plain = (
        spark.read.format("telemq")
        .option("journal", url)
        .options(**SPARK)
        .option("startingSeq", 101)
        .option("endingSeq", 900)
        .option("topics", "sensors/room1/#")
        .option("filter", "temp > 20")
        .load()
    )
    local = read_journal(
        spark,
        str(data),
        topics=["sensors/room1/#"],
        filter="temp > 20",
        options={"startingSeq": 101, "endingSeq": 900},
    )
    expected = frame_rows(local.collect())
    assert expected and frame_rows(plain.collect()) == expected
    # A user reads the topics its rules cover, and is refused the rest at planning.
    narrow = {"user": "room1", "password": PASSWORDS["room1"]}
    mine = read_journal(spark, url, topics="sensors/room1/#", options=narrow)
    assert mine.count() == 500
    with pytest.raises(Exception, match="403 not authorized to read the journal on '#'"):
        read_journal(spark, url, options=narrow).count()
    with pytest.raises(Exception, match="401 bad user name or password"):
        read_journal(spark, url, options={"user": "spark", "password": "nope"}).count()


def test_stream_offsets_are_kept_by_the_broker(
    spark: Any, served: tuple[Path, str, list[Any]], tmp_path: Path
) -> None:
    data, url, _ = served
    got = run_stream(
        spark, url, tmp_path / "ckpt", maxRowsPerBatch=1000, consumer="net-stream", **SPARK
    )
    assert len(got) == 3
    assert sorted(r["seq"] for batch in got.values() for r in batch) == list(range(1, 2501))
    client = JournalClient(url, **SPARK)
    deadline = time.monotonic() + 60
    while True:  # Spark ends the process running the offset methods after the query
        (offset,) = [o for o in client.offsets() if o["name"] == "net-stream"]
        if 0 < (offset["committed_seq"] or 0) <= 2500 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert 0 < offset["committed_seq"] <= 2500
    assert consumers.read_records(data) == []  # nothing written beside the broker's store
    client.delete_offset("net-stream")


def test_ingest_over_the_network_twice_and_the_cli(
    spark: Any, served: tuple[Path, str, list[Any]], tmp_path: Path
) -> None:
    data, url, _ = served
    lake = tmp_path / "lake"
    first = run_ingest(spark, url, lake, journal_options=SPARK, max_rows_per_batch=1000)
    assert first.rows == 2500 and first.lake_stats.rows == 2500
    second = run_ingest(spark, url, lake, journal_options=SPARK)
    assert second.rows == 0 and second.lake_stats.rows == 2500
    files = sorted(journal_table(lake).glob("date=*/*.parquet"))
    seqs = sorted(s for f in files for s in pq.read_table(f, columns=["seq"]).column(0).to_pylist())
    assert seqs == list(range(1, 2501))
    # The job's offset, stopped at the last seq, is at the broker.
    name = consumer_name(lake / "_checkpoints" / "ingest")
    (offset,) = [o for o in JournalClient(url, **SPARK).offsets() if o["name"] == name]
    assert (offset["committed_seq"], offset["running"]) == (2500, False)
    assert consumers.read_records(data) == []

    # The command line, the password from the environment: replay over the network.
    env = {
        **os.environ,
        "TELEMQ_JOURNAL_PASSWORD": PASSWORDS["spark"],
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = [
        sys.executable, "-m", "telemq", "pipeline", "replay", "--journal", url,
        "--journal-user", "spark", "--topics", "sensors/room3/#", "--filter", "temp > 20",
        "--limit", "0", "--master", "local[2]", "--quiet",
    ]  # fmt: skip
    # In tmp_path: the job writes the JVM's log to ./telemq-spark.log.
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    local = read_journal(spark, str(data), topics=["sensors/room3/#"], filter="temp > 20")
    assert done.stdout.startswith(f"{local.count():,} match(es) in seq 1..2,500"), done.stdout
    env.pop("TELEMQ_JOURNAL_PASSWORD")
    bad = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert bad.returncode == 2 and "401 bad user name or password" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


def test_journal_and_path_are_one_or_the_other(spark: Any) -> None:
    from telemq.pipeline.source import SourceOptions

    with pytest.raises(ValueError, match="not both"):
        SourceOptions.parse({"path": "x", "journal": "http://h:1"})
    with pytest.raises(ValueError, match="not both"):
        SourceOptions.parse({})
    with pytest.raises(ValueError, match="not an http"):
        SourceOptions.parse({"journal": "h:1"})
    with pytest.raises(ValueError, match="go with option journal"):
        SourceOptions.parse({"path": "x", "user": "u"})
