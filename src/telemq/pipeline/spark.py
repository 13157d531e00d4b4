"""Spark sessions for the jobs: loopback networking, no UI, Java checked first.

Spark's JVM needs Java 17 or newer. `check_java` finds it (``JAVA_HOME``, then ``PATH``) and
raises `JavaNotFoundError` with a message saying what to install, instead of PySpark's
"Java gateway process exited" after a long wait. `spark_session` then starts (or reuses) a
session on ``--master`` (default ``local[*]``) with:

- for a ``local`` master, ``SPARK_LOCAL_IP=127.0.0.1`` unless set: the driver binds to
  loopback, not the machine's network address. On a cluster the executors must reach the
  driver: set ``SPARK_LOCAL_IP`` (or ``spark.driver.host``) to an address they can reach;
- ``conf``: further settings (the jobs' ``--conf KEY=VALUE``);
- ``spark.ui.enabled=false`` unless ``ui=True``, and no console progress bar (the jobs print
  their own progress);
- ``spark.sql.session.timeZone=UTC``: the lake's dates and the aggregate windows are UTC;
- ``PYSPARK_PYTHON`` set to this interpreter unless set, so workers import this telemq (on a
  cluster, every node needs a Python with telemq at that path, or set it);
- the `telemq` data source registered;
- with ``log_file``, the JVM's own output (log4j's start-up lines, Spark's warnings, the
  Python workers' stderr) appended to that file instead of the terminal, so that a command
  prints telemq's lines only: the gateway is launched with its stdout and stderr there
  (PySpark's ``launch_gateway(popen_kwargs=...)``) and given to the ``SparkContext``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MIN_JAVA", "JavaNotFoundError", "check_java", "java_version", "spark_session"]

MIN_JAVA = 17
_INSTALL_HINT = (
    "install Java 17 or newer (Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless;"
    " macOS: brew install openjdk@17) or point JAVA_HOME at one"
)


class JavaNotFoundError(RuntimeError):
    """No usable Java for Spark; the message says what was found and what to do."""


def _java_command() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def java_version(java: str | None = None) -> int | None:
    """The major version of `java` (default: the one Spark would use), or None."""
    command = java or _java_command()
    if command is None:
        return None
    try:
        done = subprocess.run(
            [command, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def check_java() -> int:
    """The Java major version, or `JavaNotFoundError` when it is missing or older than 17."""
    command = _java_command()
    if command is None:
        raise JavaNotFoundError(
            f"Spark needs Java {MIN_JAVA}+, and no java was found: {_INSTALL_HINT}"
        )
    version = java_version(command)
    if version is None:
        raise JavaNotFoundError(f"cannot run {command} -version: {_INSTALL_HINT}")
    if version < MIN_JAVA:
        raise JavaNotFoundError(
            f"Spark needs Java {MIN_JAVA}+, but {command} is Java {version}: {_INSTALL_HINT}"
        )
    return version


def spark_session(
    master: str = "local[*]",
    app_name: str = "telemq",
    *,
    ui: bool = False,
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
    log_file: str | os.PathLike[str] | None = None,
) -> SparkSession:
    """A SparkSession for telemq jobs (see the module docstring).

    An active session (a notebook's, a test suite's) is returned as it is, with the data
    source registered: its settings are its owner's (and `log_file` is not used).
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeError(
            "the pipeline needs PySpark 4 and pyarrow: pip install 'telemq[spark]'"
        ) from exc
    if master.startswith("local"):  # on a cluster, the driver's address is the user's choice
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:  # e.g. a notebook's or a test suite's: use it as it is
        from .source import register

        register(active)
        return active
    check_java()
    settings = {
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    if master.startswith("local"):
        settings["spark.sql.shuffle.partitions"] = "4"
    settings.update(conf or {})
    if log_file is not None:
        _context_logging_to(log_file, master, app_name, settings)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    from .source import register

    register(session)
    return session


def _context_logging_to(
    log_file: str | os.PathLike[str], master: str, app_name: str, settings: Mapping[str, str]
) -> None:
    """Start the SparkContext whose JVM writes its stdout and stderr to `log_file`; the
    session builder then takes it as the active context."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    launch: Callable[..., Any] = launch_gateway  # PySpark leaves it without annotations
    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items()))
    with open(log_file, "ab") as log:  # the JVM keeps its own descriptors
        gateway = launch(conf, popen_kwargs={"stdout": log, "stderr": log})
    SparkContext(conf=conf, gateway=gateway)
