"""The options of every Spark JVM the suite starts: the client compiler only, the serial GC.

Why: the suite's Spark jobs live seconds, and a JVM that lives seconds spends much of its CPU
compiling hot code a second time with C2, the optimizing compiler, and in the parallel
collector's threads, on the two cores every test shares. With ``-XX:TieredStopAtLevel=1``
(C1, the quick compiler, only) and ``-XX:+UseSerialGC`` two of the pipeline's test modules
took a third less CPU (112 against 75 CPU-seconds for the tests, their brokers and JVMs).
The jobs do the same work: what the tests check, what telemq asks of Spark and gets back,
does not depend on which compiler ran the JVM's code. Users' jobs keep the JVM's defaults,
which pay off on long jobs.

How the options reach each JVM, all started through PySpark's launcher (``spark-submit``,
``spark-class``), which reads ``$SPARK_CONF_DIR/spark-defaults.conf``:

- the test process's own session (the `spark` fixture) and every job a test starts as a
  subprocess (``python -m telemq pipeline ...``, which inherits the environment):
  `configure_this_process` writes the file into a directory of its own and points
  ``SPARK_CONF_DIR`` at it (`spark.driver.extraJavaOptions`; `spark.executor.extraJavaOptions`
  for the executors a cluster's worker launches for those jobs);
- a standalone cluster's master and worker (tests/testsupport/spark_cluster.py): the same
  file in the cluster's conf directory, and `DAEMON_JAVA_OPTIONS` in their environment.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DAEMON_JAVA_OPTIONS = JVM_OPTIONS  # SPARK_DAEMON_JAVA_OPTS: the master's and worker's JVMs


def write_spark_defaults(conf_dir: Path) -> Path:
    """``conf_dir/spark-defaults.conf`` giving drivers and executors `JVM_OPTIONS`."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    defaults = conf_dir / "spark-defaults.conf"
    defaults.write_text(
        f"spark.driver.extraJavaOptions {JVM_OPTIONS}\n"
        f"spark.executor.extraJavaOptions {JVM_OPTIONS}\n"
    )
    return defaults


def configure_this_process() -> Path:
    """Point ``SPARK_CONF_DIR`` at a fresh directory holding `write_spark_defaults`' file, for
    the JVMs this process and its subprocesses start from now on; the directory, to remove
    at the end of the run."""
    conf_dir = Path(tempfile.mkdtemp(prefix="telemq-tests-spark-conf-"))
    write_spark_defaults(conf_dir)
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    return conf_dir
