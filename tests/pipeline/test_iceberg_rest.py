"""The Iceberg journal table through a REST catalog (`--catalog http://...`): the commands
ingest, replay a batch, aggregate and compact through pyiceberg's REST client, against a
REST server over pyiceberg's own SQL catalog (`testsupport.iceberg_rest`).

One ingest is shared by the module (the server and the lake live as long as the module)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyiceberg  # noqa: F401  (the lake extra: a missing one fails, never skips)
import pytest

from telemq.cli.main import main
from telemq.pipeline.iceberg_table import IcebergTable
from telemq.pipeline.source import read_journal
from telemq.pipeline.table_format import LakeError
from telemq.store import JournalRecord
from testsupport.iceberg_rest import IcebergRestServer
from testsupport.process import free_port

from .helpers import append_journal, telemetry

pytestmark = pytest.mark.spark

TABLE_PATH = "/v1/namespaces/telemq/tables/journal"


@dataclass
class RestLake:
    server: IcebergRestServer
    data: Path
    lake: Path
    records: list[JournalRecord]
    first_output: str

    @property
    def seqs(self) -> list[int]:
        return [r.seq for r in self.records]

    def ingest(self, *more: str) -> list[str]:
        return [
            "pipeline",
            "ingest",
            "-d",
            str(self.data),
            "-l",
            str(self.lake),
            "--format",
            "iceberg",
            "--catalog",
            self.server.url,
            *more,
        ]

    def table(self) -> Any:
        """The journal table, loaded by pyiceberg's REST client on its own."""
        from pyiceberg.catalog import load_catalog

        return load_catalog("reader", type="rest", uri=self.server.url).load_table("telemq.journal")

    def commits(self) -> int:
        return self.server.requests.count(f"POST {TABLE_PATH}")


def snapshot_seqs(table: Any) -> list[int]:
    return sorted(table.scan().to_arrow().column("seq").to_pylist())


def duckdb_seqs(table: Any) -> list[int]:
    """The seqs of the files the current snapshot lists, read by DuckDB."""
    import duckdb

    paths = [t.file.file_path.removeprefix("file:") for t in table.scan().plan_files()]
    rows = duckdb.sql(f"SELECT seq FROM read_parquet({paths!r}) ORDER BY seq").fetchall()
    return [row[0] for row in rows]


@pytest.fixture(scope="module")
def rest_lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestLake]:
    """A REST catalog, and a journal of 300 rows over two dates ingested through it in
    three batches by the command line."""
    root = tmp_path_factory.mktemp("rest")
    server = IcebergRestServer(root / "catalog").start()
    try:
        data, lake = root / "data", root / "lake"
        records = append_journal(data, telemetry(300), ts_step_us=400_000_000)
        shared = RestLake(server, data, lake, records, "")
        out = io.StringIO()  # capsys is the tests'
        with contextlib.redirect_stdout(out):
            assert main(shared.ingest("--max-rows-per-batch", "100", "-q")) == 0
        shared.first_output = out.getvalue()
        yield shared
        assert not server.failures, server.failures
    finally:
        server.stop()


def test_ingest_through_rest_lands_each_seq_once_and_a_replay_adds_nothing(
    rest_lake: RestLake, capsys: pytest.CaptureFixture[str]
) -> None:
    out = rest_lake.first_output
    assert "ingested 300 rows in 3 batch(es)" in out, out
    assert "iceberg): 300 rows" in out and "seq 1..300" in out, out
    assert not (rest_lake.lake / "_iceberg").exists(), "no catalog of the lake's own"
    assert "POST /v1/namespaces/telemq/tables" in rest_lake.server.requests
    assert rest_lake.commits() == 3, rest_lake.server.requests  # one snapshot per batch

    table = rest_lake.table()
    assert table.location() == f"file:{rest_lake.lake / 'journal'}", "the table is in the lake"
    assert snapshot_seqs(table) == rest_lake.seqs and duckdb_seqs(table) == rest_lake.seqs
    summaries = [s.summary for s in table.metadata.snapshots]
    assert [s["telemq.batch-id"] for s in summaries if s is not None] == ["0", "1", "2"]

    # Spark forgets it finished batch 2 (a crash between the table's commit and its own
    # record of it): the run replays it, and the batch is found committed through REST.
    commits = rest_lake.lake / "_checkpoints" / "ingest" / "spark" / "commits"
    for name in ("2", ".2.crc"):
        (commits / name).unlink()
    before = rest_lake.commits()
    assert main(rest_lake.ingest("-q")) == 0
    assert "ingested 0 rows" in capsys.readouterr().out
    assert rest_lake.commits() == before, "the replay committed nothing"
    again = rest_lake.table()
    assert len(again.metadata.snapshots) == 3
    assert snapshot_seqs(again) == rest_lake.seqs and duckdb_seqs(again) == rest_lake.seqs


def test_a_conflicting_commit_through_rest_is_retried(
    spark: Any, rest_lake: RestLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer commits between a batch's look at the table and its commit: the
    server answers 409, and the batch is checked and committed again on the new snapshot."""
    from pyiceberg.table import Transaction

    more = append_journal(rest_lake.data, telemetry(20, seed=2), ts_step_us=400_000_000)
    rest_lake.records.extend(more)
    first = more[0].seq
    commit = Transaction.commit_transaction
    raced: list[int] = []

    def racing(self: Transaction) -> Any:
        if not raced:
            raced.append(1)  # another query's batch lands first
            other = IcebergTable(
                spark, str(rest_lake.lake), catalog=rest_lake.server.url, table=None, query_id="b"
            )
            frame = read_journal(spark, str(rest_lake.data), options={"startingSeq": first + 10})
            other.commit_batch(frame, 0)
        return commit(self)

    monkeypatch.setattr(Transaction, "commit_transaction", racing)
    mine = IcebergTable(
        spark, str(rest_lake.lake), catalog=rest_lake.server.url, table=None, query_id="a"
    )
    frame = read_journal(
        spark, str(rest_lake.data), options={"startingSeq": first, "endingSeq": first + 9}
    )
    before = rest_lake.commits()
    stats = mine.commit_batch(frame, 0)
    monkeypatch.undo()
    assert stats.rows == 10
    # the other query's commit, this one's refused (409), this one's again
    assert rest_lake.commits() == before + 3
    refused = [r for r in rest_lake.server.refused if r.startswith(f"POST {TABLE_PATH}:")]
    assert len(refused) == 1 and ": 409 CommitFailedException:" in refused[0], refused
    table = rest_lake.table()
    assert snapshot_seqs(table) == rest_lake.seqs and duckdb_seqs(table) == rest_lake.seqs


def test_aggregate_and_compact_read_the_rest_catalogued_table(
    rest_lake: RestLake, capsys: pytest.CaptureFixture[str]
) -> None:
    lake, url, rows = str(rest_lake.lake), rest_lake.server.url, len(rest_lake.seqs)
    aggregate = ["pipeline", "aggregate", "-l", lake, "--catalog", url, "--window", "1h"]
    assert main([*aggregate, "--fields", "temp", "-q"]) == 0
    out = capsys.readouterr().out
    assert f"aggregated {rows:,} messages into" in out, out

    files = len(list(rest_lake.table().scan().plan_files()))
    compact = ["pipeline", "compact", "-l", lake, "--catalog", url, "--keep-hours", "0", "-q"]
    assert main(compact) == 0
    out = capsys.readouterr().out
    assert "snapshot(s) expired" in out and f"table: {rows:,} rows" in out, out
    table = rest_lake.table()
    assert len(list(table.scan().plan_files())) < files, out
    assert len(table.metadata.snapshots) == 1, "the older snapshots expired"
    assert snapshot_seqs(table) == rest_lake.seqs and duckdb_seqs(table) == rest_lake.seqs
    on_disk = sorted((rest_lake.lake / "journal" / "data").rglob("*.parquet"))
    assert len(on_disk) == len(list(table.scan().plan_files())), "rewritten files deleted"


def test_a_rest_catalog_that_cannot_be_used_is_one_line(
    spark: Any, rest_lake: RestLake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    lake = tmp_path / "lake"
    ingest = ["pipeline", "ingest", "-d", str(rest_lake.data), "-l", str(lake)]
    assert main([*ingest, "--format", "iceberg", "--catalog", nobody, "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"telemq: iceberg catalog {nobody}: cannot be used"), err
    assert err.count("\n") == 1 and "Connection refused" in err, err
    assert not lake.exists(), "nothing written"
    not_iceberg = f"{rest_lake.server.url}/not-a-catalog"  # answers, but 404 and no JSON
    assert main([*ingest, "--format", "iceberg", "--catalog", not_iceberg, "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"telemq: iceberg catalog {not_iceberg}: cannot be used"), err
    assert err.count("\n") == 1 and "404" in err, err
    assert not lake.exists(), "nothing written"
    assert main(["pipeline", "compact", "-l", str(lake), "--catalog", nobody, "-q"]) == 2
    assert "cannot be used" in capsys.readouterr().err

    # The catalog's table is in another lake: refused, not written beside it.
    elsewhere = IcebergTable(
        spark, str(lake), catalog=rest_lake.server.url, table=None, query_id="q"
    )
    with pytest.raises(LakeError, match="not in lake"):
        elsewhere.check()
    assert not lake.exists()


def test_the_rest_catalog_takes_pyiceberg_configuration(
    spark: Any, rest_lake: RestLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Properties of the catalog named ``telemq`` in pyiceberg's configuration reach the
    REST client: here the warehouse, which a REST catalog is asked its configuration for."""
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    monkeypatch.setenv("PYICEBERG_CATALOG__TELEMQ__WAREHOUSE", "lakes")
    monkeypatch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())  # read at import
    table = IcebergTable(
        spark, str(rest_lake.lake), catalog=rest_lake.server.url, table=None, query_id=None
    )
    table.check()
    assert rest_lake.server.requests[-2:] == ["GET /v1/config?warehouse=lakes", f"GET {TABLE_PATH}"]
