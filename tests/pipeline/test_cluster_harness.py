"""The Spark standalone harness (`testsupport.spark_cluster`) gives what its tests rely on:
jobs run on executors of the cluster, which cannot see the hidden directories the driver sees,
and an executor killed in the middle of a job is replaced by the worker, the job completing.

The drivers run in subprocesses: a test process may already hold the suite's local
SparkContext, and a Python process has one at most.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testsupport.process import wait_until
from testsupport.spark_cluster import SparkCluster, require_private_mounts, standalone_cluster

# One standalone cluster at a time: under pytest-xdist (--dist loadgroup) the tests of both
# modules run on one worker, each module's cluster started once, and first (xdist hands
# out the largest groups first), beside the rest of the suite.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(120), pytest.mark.xdist_group("spark-cluster")]

DRIVER_DEADLINE = 75.0
RESULT = "RESULT "

# A driver: argv[1] is JSON with the Spark settings ("conf") and the job's arguments ("args").
# The job's functions go to the executors by value (cloudpickle), from this __main__.
DRIVER_PRELUDE = """
import json, os, sys, time
from pyspark.sql import SparkSession

spec = json.loads(sys.argv[1])
args = spec["args"]
builder = SparkSession.builder.appName(spec["app"])
for key, value in spec["conf"].items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
sc = spark.sparkContext
sc.setLogLevel("WARN")


def executor_pid():
    # The Python worker's nearest ancestor that is an executor JVM, or None (not on one).
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                return pid
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        pid = int(text[text.rfind(")") + 2:].split()[1])
    return None


def finish(result):
    result["driver_pids"] = [os.getpid(), sc._jvm.java.lang.ProcessHandle.current().pid()]
    spark.stop()
    print("RESULT " + json.dumps(result), flush=True)
"""

PROBE_JOB = """
secret = args["secret"]


def probe(index):
    return [(index, os.path.exists(secret), executor_pid())]


rows = sc.parallelize(range(2), 2).flatMap(probe).collect()
finish({"driver_sees": os.path.exists(secret), "rows": rows})
"""

# Each task marks its start (partition, attempt, executor) in a directory both sides see,
# then sleeps, so that an executor can be killed while the tasks run.
SLOW_JOB = """
from pyspark import TaskContext

marks = args["marks"]


def slow_sum(values):
    ctx = TaskContext.get()
    name = f"p{ctx.partitionId()}-a{ctx.attemptNumber()}-e{executor_pid()}"
    open(os.path.join(marks, name), "w").close()
    time.sleep(args["sleep"])
    yield sum(values)


total = sc.parallelize(range(1000), 2).mapPartitions(slow_sum).sum()
finish({"total": total})
"""


@pytest.fixture(scope="module")
def hidden_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``secret.txt``: the driver sees it, the cluster's executors do not."""
    hidden = tmp_path_factory.mktemp("hidden")
    (hidden / "secret.txt").write_text("only the driver's machine has this\n")
    return hidden


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, hidden_dir: Path) -> Iterator[SparkCluster]:
    require_private_mounts()
    with standalone_cluster(tmp_path_factory.mktemp("cluster"), [hidden_dir]) as running:
        yield running


def driver_command(cluster: SparkCluster, job: str, app: str, **args: Any) -> list[str]:
    spec = {"app": app, "conf": cluster.driver_conf(), "args": args}
    return [sys.executable, "-c", DRIVER_PRELUDE + job, json.dumps(spec)]


def driver_result(cluster: SparkCluster, returncode: int, stdout: str, stderr: str) -> Any:
    """The driver's RESULT line; a failure with its output and the cluster's logs if none."""
    for line in stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    pytest.fail(
        f"the driver exited with {returncode} and no result\n--- driver stdout ---\n{stdout}\n"
        f"--- driver stderr ---\n{stderr[-6000:]}\n{cluster.log_tail()}"
    )


def test_executors_run_on_the_cluster_and_do_not_see_hidden_files(
    cluster: SparkCluster, hidden_dir: Path, tmp_path: Path
) -> None:
    secret = hidden_dir / "secret.txt"
    command = driver_command(cluster, PROBE_JOB, "harness-probe", secret=str(secret))
    done = subprocess.run(
        command,
        env=cluster.driver_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DRIVER_DEADLINE,
        check=False,
    )
    result = driver_result(cluster, done.returncode, done.stdout, done.stderr)
    assert result["driver_sees"] is True
    rows = sorted(result["rows"])
    assert [index for index, _, _ in rows] == [0, 1]
    assert [sees for _, sees, _ in rows] == [False, False], "an executor saw the hidden file"
    executors = {pid for _, _, pid in rows}
    assert None not in executors, "a task did not run under an executor JVM"
    assert not executors & set(result["driver_pids"])


def test_a_killed_executor_is_replaced_and_the_job_completes(
    cluster: SparkCluster, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    command = driver_command(cluster, SLOW_JOB, "harness-kill", marks=str(marks), sleep=5)
    started = time.monotonic()
    driver = subprocess.Popen(
        command,
        env=cluster.driver_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: len(list(marks.iterdir())) == 2, 45, interval=0.1), (
            f"the tasks did not start\n{cluster.log_tail()}"
        )
        first = {mark.name for mark in marks.iterdir()}
        killed = cluster.kill_executors()
        assert killed == 1
        stdout, stderr = driver.communicate(timeout=DRIVER_DEADLINE - (time.monotonic() - started))
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    result = driver_result(cluster, driver.returncode, stdout, stderr)
    assert result["total"] == sum(range(1000))
    retried = {mark.name for mark in marks.iterdir()} - first
    assert {name.split("-")[0] for name in retried} == {"p0", "p1"}, sorted(retried)
    old = {name.split("-e")[1] for name in first}
    new = {name.split("-e")[1] for name in retried}
    assert len(old) == 1 and not old & new, "the retries ran on the killed executor"
