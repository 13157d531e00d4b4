"""The jobs on a real Spark standalone cluster, reading the journal over the network.

A broker subprocess serves its journal over HTTP (users, ACL). A standalone master and worker
(`testsupport.spark_cluster`, PySpark's own ``bin/spark-class``) run on loopback; the worker,
and so its executors, in a mount namespace with an empty tmpfs over the broker's data
directory: they are as far from the broker's files as on another host. The jobs run as users
run them, ``telemq pipeline ... --master spark://...``, and must give what ``local`` gives:
ingest twice (the second adds nothing), aggregate and replay.

The kill test runs once per table format with a log (Delta, Iceberg), on one job and its
rerun: an executor SIGKILLed mid-ingest is replaced; the driver is then SIGKILLed between
writing a batch's files and committing them (the `table_format.PAUSE_BEFORE_COMMIT` hook):
those files are on disk and no reader sees them; the next run removes them and the lake holds
every seq exactly once. The lake is a ``file:`` URI both sides reach (the test's directory,
which the worker's namespace does not cover), read as users read it: by the format's own
library (deltalake, pyiceberg) and by DuckDB over exactly the files the current version lists.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from telemq.cli.main import main
from telemq.pipeline.ingest import journal_table
from telemq.pipeline.table_format import PAUSE_BEFORE_COMMIT
from testsupport.process import users_and_acl, wait_until
from testsupport.spark_cluster import SparkCluster, require_private_mounts, standalone_cluster

from .helpers import journal_service, telemetry

# Under pytest-xdist (--dist loadgroup) the tests of both cluster modules run on one worker,
# each module's cluster started once, and first (tests/conftest.py), beside the rest of the
# suite; the kill test has a group, and so a worker and a cluster, of its own (below).
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600), pytest.mark.xdist_group("spark-cluster")]

PASSWORDS = {"spark": "spark-cluster-pw"}
ACL = [("spark", "journal", "#", True)]
ROWS = 20_000
JOB_DEADLINE = 240.0
PAUSED_BATCH = 5  # of 8 (2,500 rows each): the driver is killed before committing it


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """``(the broker's data directory, its journal service URL)``."""
    workdir = tmp_path_factory.mktemp("cluster-broker")
    config = users_and_acl(PASSWORDS, ACL)
    pubs = telemetry(ROWS)
    with journal_service(workdir, pubs, config_text=config, ts_step_us=15_000_000) as (b, url):
        yield b.data_dir, url


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, served: tuple[Path, str]
) -> Iterator[SparkCluster]:
    require_private_mounts()
    data, _ = served
    with standalone_cluster(tmp_path_factory.mktemp("cluster"), [data]) as running:
        yield running


def journal_args(url: str) -> list[str]:
    return ["--journal", url, "--journal-user", "spark"]


def on_cluster(cluster: SparkCluster, *arguments: str) -> list[str]:
    return [
        sys.executable, "-m", "telemq", "pipeline", *arguments, "--master", cluster.master_url,
        "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.host=127.0.0.1",
    ]  # fmt: skip


def run_on_cluster(cluster: SparkCluster, cwd: Path, *arguments: str) -> str:
    """Run a job on the cluster; its stdout (a failure shows its stderr and the logs)."""
    env = {**cluster.driver_env(), "TELEMQ_JOURNAL_PASSWORD": PASSWORDS["spark"]}
    done = subprocess.run(
        on_cluster(cluster, *arguments),
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE,
        check=False,
    )
    assert done.returncode == 0, f"{done.stderr[-6000:]}\n{cluster.log_tail()}"
    return done.stdout


def run_locally(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *arguments: str
) -> str:
    """The same job in this process, on the suite's `local[2]` session."""
    monkeypatch.setenv("TELEMQ_JOURNAL_PASSWORD", PASSWORDS["spark"])
    capsys.readouterr()
    assert main(["pipeline", *arguments, "-q"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def table_rows(path: Path, key: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """Every row of a Parquet table (any partitioning), sorted by `key`; floats rounded (a
    sum's last bits depend on the order Spark adds in)."""
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        row.pop("date", None)  # the partition column, as pyarrow reads it back
        for name, value in row.items():
            if isinstance(value, float):
                row[name] = round(value, 9)
    return sorted((tuple(r[k] for k in key), tuple(sorted(r.items()))) for r in rows)


def batch_ids(lake: Path) -> set[int]:
    """The ids of the batches with files written in the lake's table, committed or not:
    ``batch-<id>-<k>.parquet`` (Parquet), ``<query>-<id>-<attempt>-<k>.parquet`` (Delta),
    ``data/<query>/<id>-<t>-<r>/date=*/*.parquet`` (Iceberg)."""
    table = journal_table(lake)
    names = [f.name.split("-") for f in table.glob("date=*/*.parquet")]
    ids = {int(parts[1] if parts[0] == "batch" else parts[2]) for parts in names}
    attempts = {f.parent.parent for f in table.glob("data/*/*/date=*/*.parquet")}
    return ids | {int(a.name[:12]) for a in attempts if a.parent.name != "compact"}


def lake_seqs(lake: Path) -> list[int]:
    files = sorted(journal_table(lake).glob("date=*/*.parquet"))
    return sorted(s for f in files for s in pq.read_table(f, columns=["seq"]).column(0).to_pylist())


@dataclass(frozen=True, slots=True)
class CurrentVersion:
    """A table's current version as readers see it, and the data files on disk."""

    seqs: list[int]  # read by the format's own library
    duckdb_seqs: list[int]  # read by DuckDB from the files the version lists
    listed: set[str]  # those files
    on_disk: set[str]  # every data file under the table


def current_version(table_format: str, lake: Path) -> CurrentVersion:
    import duckdb

    table = journal_table(lake)
    if table_format == "delta":
        from deltalake import DeltaTable

        delta = DeltaTable(str(table))
        seqs = delta.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist()
        listed = [u.removeprefix("file://") for u in delta.file_uris()]
        on_disk = table.glob("date=*/*.parquet")
    else:
        from pyiceberg.catalog import load_catalog

        catalog_db = lake / "_iceberg" / "catalog.db"
        catalog = load_catalog("telemq", type="sql", uri=f"sqlite:///{catalog_db}")
        iceberg = catalog.load_table("telemq.journal")
        seqs = iceberg.scan(selected_fields=("seq",)).to_arrow().column("seq").to_pylist()
        listed = [t.file.file_path.removeprefix("file:") for t in iceberg.scan().plan_files()]
        on_disk = (table / "data").rglob("*.parquet")
    query = f"SELECT seq FROM read_parquet({listed!r})" if listed else "SELECT 1 WHERE false"
    duck = [row[0] for row in duckdb.sql(query).fetchall()]
    return CurrentVersion(
        sorted(seqs),
        sorted(duck),
        {os.path.realpath(p) for p in listed},
        {os.path.realpath(p) for p in on_disk},
    )


def test_the_jobs_on_a_cluster_equal_the_jobs_on_local(
    spark: Any,
    cluster: SparkCluster,
    served: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, url = served
    remote_lake, local_lake = tmp_path / "cluster-lake", tmp_path / "local-lake"
    source = journal_args(url)

    out = run_on_cluster(cluster, tmp_path, "ingest", *source, "--lake", str(remote_lake), "-q")
    assert out.startswith(f"ingested {ROWS:,} rows"), out
    again = run_on_cluster(cluster, tmp_path, "ingest", *source, "--lake", str(remote_lake), "-q")
    assert again.startswith("ingested 0 rows"), again
    assert lake_seqs(remote_lake) == list(range(1, ROWS + 1))
    run_locally(monkeypatch, capsys, "ingest", *source, "--lake", str(local_lake))
    key = ("seq",)
    assert table_rows(journal_table(remote_lake), key) == table_rows(journal_table(local_lake), key)

    window = ["aggregate", "--window", "1h", "--fields", "temp,hum"]
    run_on_cluster(cluster, tmp_path, *window, "--lake", str(remote_lake), "-q")
    run_locally(monkeypatch, capsys, *window, "--lake", str(local_lake))
    key = ("topic", "window_start")
    remote = table_rows(remote_lake / "aggregates" / "1h", key)
    assert remote and remote == table_rows(local_lake / "aggregates" / "1h", key)

    replay = ["replay", *source, "--topics", "sensors/room2/#", "--filter", "temp > 20"]
    remote_out, local_out = tmp_path / "cluster-replay", tmp_path / "local-replay"
    printed = run_on_cluster(cluster, tmp_path, *replay, "--output", str(remote_out), "-q")
    shown = run_locally(monkeypatch, capsys, *replay, "--output", str(local_out))
    assert printed.splitlines()[0].split(" (")[0] == shown.splitlines()[0].split(" (")[0]
    remote = table_rows(remote_out, ("seq",))
    assert remote and remote == table_rows(local_out, ("seq",))


# A group of its own: another worker starts a second cluster (the module's fixtures are per
# worker) and runs the kills beside the test above, which would otherwise follow it alone at
# the end of the suite.
@pytest.mark.xdist_group("spark-cluster-kills")
@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_an_executor_then_the_driver_killed_mid_ingest_land_every_seq_once(
    cluster: SparkCluster, served: tuple[Path, str], tmp_path: Path, table_format: str
) -> None:
    """An executor SIGKILLed mid-batch is replaced; later the driver is SIGKILLed between
    writing a batch's files and committing them; the next run completes the lake."""
    _, url = served
    lake, paused = tmp_path / "lake", tmp_path / "paused"
    ingest = (
        "ingest", *journal_args(url), "--lake", f"file:{lake}", "--format", table_format,
        "--max-rows-per-batch", "2500", "-q",
    )  # fmt: skip
    env = {
        **cluster.driver_env(),
        "TELEMQ_JOURNAL_PASSWORD": PASSWORDS["spark"],
        PAUSE_BEFORE_COMMIT: f"{PAUSED_BATCH}:{paused}",
    }
    job = subprocess.Popen(
        on_cluster(cluster, *ingest), env=env, cwd=tmp_path, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until(lambda: bool(batch_ids(lake)) or job.poll() is not None, JOB_DEADLINE, 0.1)
        assert batch_ids(lake) and job.poll() is None, "the job wrote no batch"
        before_kill = batch_ids(lake)
        killed = cluster.executors()  # pid -> (application id, executor id)
        assert cluster.kill_executors() >= 1, "no executor to kill"
        after_kill = batch_ids(lake)
        wait_until(lambda: paused.exists() or job.poll() is not None, JOB_DEADLINE, 0.1)
        running = job.poll() is None
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver and its JVM
        _, stderr = job.communicate()
    assert running and paused.exists(), f"{stderr.decode()[-6000:]}\n{cluster.log_tail()}"
    # The executor kill came before the paused batch: batches run one after the other, and
    # a batch's files are written only at its end, so when `after_kill` was read the batch
    # after its last one may have been running already, but the one after that had not
    # started. The paused batch ran, from start to the end of its write, after the kill.
    batches = batch_ids(lake)
    around = f"batches before the kill {sorted(before_kill)}, after it {sorted(after_kill)}"
    assert max(batches) == PAUSED_BATCH >= max(after_kill) + 2, f"{around}, at the pause {batches}"
    # A replacement executor ran tasks: the application's executors that were not killed,
    # launched after the kill (the killed ones held every core), with tasks in their logs.
    apps = {app for app, _ in killed.values()}
    assert len(apps) == 1, killed
    (app,) = apps
    dead = {executor for _, executor in killed.values()}
    launched = cluster.executor_ids(app)
    replacements = [e for e in launched if e not in dead]
    ran = [e for e in replacements if "Running task" in cluster.executor_log(app, e)]
    assert ran, (
        f"no replacement executor of {app} ran a task: killed {sorted(dead)}, launched "
        f"{launched}\n{cluster.log_tail()}"
    )
    # And what was killed was doing this job's work: it had run tasks before the kill.
    assert any("Running task" in cluster.executor_log(app, e) for e in dead), sorted(dead)

    # The driver's kill left the paused batch's files on disk, unlisted: no reader sees them.
    at_kill = current_version(table_format, lake)
    committed = at_kill.seqs
    assert 0 < len(committed) < ROWS and committed == list(range(1, len(committed) + 1))
    assert at_kill.duckdb_seqs == committed
    unread = at_kill.on_disk - at_kill.listed
    assert unread and at_kill.listed < at_kill.on_disk, "the paused batch's files were written"

    out = run_on_cluster(cluster, tmp_path, *ingest)  # replays the paused batch, goes on
    assert out.startswith(f"ingested {ROWS - len(committed):,} rows"), out
    done = current_version(table_format, lake)
    assert done.seqs == done.duckdb_seqs == list(range(1, ROWS + 1))
    assert at_kill.listed <= done.listed and done.listed == done.on_disk
    assert not unread & done.on_disk, "the files of the batch that never committed are gone"
