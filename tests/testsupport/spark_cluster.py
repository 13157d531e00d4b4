"""`standalone_cluster`: a real Spark standalone cluster (one master, one worker) for a test.

Local mode runs the tasks in the driver's JVM, on the driver's files: a job that only works
because an executor can open a path of the driver's machine passes there and fails on a
cluster. This harness starts the two daemons that make a cluster, from the installed PySpark
(``<pyspark home>/bin/spark-class``), on loopback ports of their own:

- the master (``org.apache.spark.deploy.master.Master``), RPC and web UI ports picked free
  (`free_port`), without its REST submission server (a fixed port);
- the worker (``org.apache.spark.deploy.worker.Worker``) in a mount namespace of its own
  (``unshare -m --propagation private``), in which every `hidden` directory is covered by an
  empty tmpfs before the JVM starts. The executors the worker launches, and their Python
  workers, inherit the namespace: they are as far from those files as on another host, while
  the test and a driver it starts see them. The mounts never propagate to the host and go away
  with the namespace's last process.

The cluster is ready when the master's web UI JSON (``/json/``) lists the worker as ALIVE;
a daemon that exits, or a worker that is not ALIVE within `START_DEADLINE`, raises
`ClusterStartError` with the tail of both logs. Ports are picked free and the daemons run with
``spark.port.maxRetries=0``, so a port taken in between fails the start instead of leaving
Spark on another port than `master_url` says.

A driver joins with `SparkCluster.driver_conf` (the master URL, a loopback driver, no UI, a
small executor) and, in a subprocess, `SparkCluster.driver_env` (PySpark's home, this
interpreter for the Python workers). `executor_pids` finds the executor JVMs through
``/proc`` (descendants of the worker), so a test can kill them (`kill_executors`) and watch
the worker start new ones; `executors` names them (application and executor id), and
`executor_ids` and `executor_log` read what the worker keeps of every executor it launched.

On exit the worker, then the master, get SIGTERM (to their process groups: each starts a
session of its own), then SIGKILL after `STOP_DEADLINE`. Every descendant seen before that
(executors, PySpark daemons in process groups of their own) that outlives its daemon is
SIGKILLed too, so no JVM or Python worker is left behind; `ClusterStopError` if one is.

`unshare_problem` says whether the mount namespace works here (root or CAP_SYS_ADMIN on
Linux); `require_private_mounts` fails the calling test, with that reason, when it does not.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testsupport import spark_jvm
from testsupport.process import HOST, free_port, wait_until
from testsupport.requirements import require

START_DEADLINE = 60.0
STOP_DEADLINE = 15.0
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# Spark moves to the next port when one is taken; the ports here were picked free, so a taken
# one is a race that must fail loudly, not a cluster on ports no one knows.
DAEMON_OPTS = "-Dspark.port.maxRetries=0"
# The master's REST submission server (cluster-mode submissions, which no test makes) is on by
# default, on the fixed port 6066: two clusters at once (two pytest-xdist workers) would fight
# for it, and the second master would fail to start.
MASTER_OPTS = DAEMON_OPTS + " -Dspark.master.rest.enabled=false"


class ClusterStartError(RuntimeError):
    """The master or the worker exited, or the worker did not register in time."""


class ClusterStopError(RuntimeError):
    """A process of the cluster survived SIGKILL."""


def spark_home() -> Path:
    """The installed PySpark's directory: its ``bin/spark-class`` and ``jars`` are Spark's."""
    import pyspark

    return Path(os.path.dirname(pyspark.__file__))


def spark_class() -> Path:
    return spark_home() / "bin" / "spark-class"


# --- processes, through /proc ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What ``/proc/<pid>/stat`` says that matters here; `start` tells a reused pid apart."""

    pid: int
    ppid: int
    state: str
    start: int


def proc_stat(pid: int) -> ProcStat | None:
    """`ProcStat` of a live process, or None (gone, or a zombie: it runs nothing any more)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after it.
    fields = text[text.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return ProcStat(pid=pid, ppid=int(fields[1]), state=fields[0], start=int(fields[19]))


def all_stats() -> list[ProcStat]:
    stats = (proc_stat(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return [stat for stat in stats if stat is not None]


def descendants(pid: int) -> list[ProcStat]:
    """Every live descendant of `pid`, parents before children."""
    children: dict[int, list[ProcStat]] = {}
    for stat in all_stats():
        children.setdefault(stat.ppid, []).append(stat)
    found: list[ProcStat] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child.pid)
    return found


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def same_process_alive(stat: ProcStat) -> bool:
    """Whether the process `stat` describes still runs (and its pid was not reused)."""
    now = proc_stat(stat.pid)
    return now is not None and now.start == stat.start


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        tail = ["(no log file)"]
    return f"--- {path.name} (last {len(tail)} lines) ---\n" + "\n".join(tail)


# --- the mount namespace ----------------------------------------------------------------------


def hiding_command(hidden: Sequence[Path], command: Sequence[str]) -> list[str]:
    """`command` in a new, private mount namespace with an empty tmpfs over each of `hidden`."""
    mounts = [f"mount -t tmpfs tmpfs {shlex.quote(str(path))}" for path in hidden]
    script = " && ".join([*mounts, "exec " + shlex.join(command)])
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script]


def unshare_problem() -> str | None:
    """None when a tmpfs mounted in ``unshare -m`` hides a directory here and stays there;
    else why not."""
    if not sys.platform.startswith("linux"):
        return f"mount namespaces are Linux-only, and this is {sys.platform}"
    for tool in ("unshare", "mount"):
        if shutil.which(tool) is None:
            return f"no {tool} command on PATH (util-linux)"
    with tempfile.TemporaryDirectory(prefix="telemq-unshare-") as tmp:
        probe = Path(tmp) / "probe"
        probe.write_text("visible\n")
        check = hiding_command([Path(tmp)], ["test", "!", "-e", str(probe)])
        try:
            done = subprocess.run(check, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"cannot run unshare: {exc}"
        if not probe.exists():  # the mount leaked: undo it before anything else
            subprocess.run(["umount", tmp], capture_output=True, check=False)
            return "a tmpfs mounted in `unshare -m --propagation private` showed outside it"
        if done.returncode != 0:
            reason = done.stderr.strip() or f"exit status {done.returncode}"
            return (
                "cannot hide a directory in a mount namespace (`unshare -m` and a tmpfs mount"
                f" need root or CAP_SYS_ADMIN): {reason}"
            )
    return None


def require_private_mounts() -> None:
    """Fail the calling test unless the worker's mount namespace works here: the cluster
    tests never skip (CI runs them as root; util-linux's ``unshare`` and ``mount`` come with
    every Debian)."""
    require(
        "a private mount namespace for the Spark worker (`unshare -m` and `mount -t tmpfs`)",
        unshare_problem(),
        fix="run the tests as root (or with CAP_SYS_ADMIN), as CI does, on Linux with "
        "util-linux; `bash scripts/bootstrap.sh --test` installs the rest of the cluster "
        "(PySpark and Java)",
    )


# --- the cluster ------------------------------------------------------------------------------


def daemon_env(tmp_dir: Path) -> dict[str, str]:
    """The environment of the daemons and of a driver subprocess: this machine's, without
    its Spark settings (a SPARK_HOME, a conf dir, SPARK_MASTER_PORT...), plus the harness's:
    the suite's JVM options (`spark_jvm`) for the daemons, drivers and executors."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    conf_dir = tmp_dir / "conf"  # no spark-env.sh; spark-defaults.conf: the JVM options only
    spark_jvm.write_spark_defaults(conf_dir)
    env.update(
        SPARK_DAEMON_JAVA_OPTS=spark_jvm.DAEMON_JAVA_OPTIONS,
        SPARK_HOME=str(spark_home()),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP=HOST,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    return env


@dataclass
class SparkCluster:
    """A running standalone cluster: where to reach it, its logs, its processes."""

    master_url: str
    master_ui: str
    master_log: Path
    worker_log: Path
    work_dir: Path
    tmp_dir: Path
    cores: int
    memory: str
    master: subprocess.Popen[bytes] = field(repr=False)
    worker: subprocess.Popen[bytes] = field(repr=False)
    seen: dict[int, ProcStat] = field(default_factory=dict, repr=False)

    def status(self) -> dict[str, Any]:
        """The master's state, as its web UI serves it (``/json/``)."""
        with urllib.request.urlopen(self.master_ui + "/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return state

    def alive_workers(self) -> list[dict[str, Any]]:
        try:
            workers: list[dict[str, Any]] = self.status().get("workers", [])
        except (OSError, ValueError):
            return []
        return [worker for worker in workers if worker.get("state") == "ALIVE"]

    def driver_conf(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Spark settings for a driver on this cluster: loopback, no UI, an executor that fits
        the worker; `extra` added or overriding."""
        conf = {
            "spark.master": self.master_url,
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.memory": "512m",
            "spark.sql.session.timeZone": "UTC",
        }
        conf.update(extra or {})
        return conf

    def driver_env(self) -> dict[str, str]:
        """The environment for a driver subprocess (PySpark's home, this interpreter)."""
        return daemon_env(self.tmp_dir)

    def executor_pids(self) -> list[int]:
        """Executor JVMs (``CoarseGrainedExecutorBackend``) the worker runs now."""
        pids = []
        for stat in descendants(self.worker.pid):
            self.seen.setdefault(stat.pid, stat)
            if EXECUTOR_CLASS in cmdline(stat.pid):
                pids.append(stat.pid)
        return pids

    def executors(self) -> dict[int, tuple[str, str]]:
        """The executor JVMs the worker runs now: pid -> (application id, executor id), as
        the worker passed them on each one's command line."""
        found = {}
        for pid in self.executor_pids():
            args = cmdline(pid)
            named = dict(itertools.pairwise(args))
            if "--app-id" in named and "--executor-id" in named:
                found[pid] = (named["--app-id"], named["--executor-id"])
        return found

    def executor_ids(self, app_id: str) -> list[str]:
        """Every executor the worker has launched for `app_id`, running or ended: the
        directories it made for them (``<work dir>/<app id>/<executor id>``)."""
        app_dir = self.work_dir / app_id
        if not app_dir.is_dir():
            return []
        return sorted((d.name for d in app_dir.iterdir() if d.is_dir()), key=int)

    def executor_log(self, app_id: str, executor_id: str) -> str:
        """What executor `executor_id` of `app_id` wrote to its stderr (Spark's log, at INFO:
        "Running task ..." for every task it ran)."""
        path = self.work_dir / app_id / executor_id / "stderr"
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_executors(self, count: int = 1, timeout: float = START_DEADLINE) -> list[int]:
        """Executor pids once at least `count` run; `AssertionError` after `timeout` s."""
        found: list[int] = []

        def enough() -> bool:
            found[:] = self.executor_pids()
            return len(found) >= count

        if not wait_until(enough, timeout, interval=0.1):
            raise AssertionError(
                f"{len(found)} executor(s) after {timeout} s, wanted {count}\n{self.log_tail()}"
            )
        return found

    def kill_executors(self, sig: int = signal.SIGKILL) -> int:
        """Send `sig` to every executor JVM (SIGKILL: a crash); how many got it."""
        killed = 0
        for pid in self.executor_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                killed += 1
        return killed

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.master_log, lines) + "\n" + log_tail(self.worker_log, lines)

    def stop(self) -> None:
        """Worker, then master: SIGTERM, then SIGKILL; then any descendant left (see the module
        docstring). `ClusterStopError` if a process survives all that."""
        for proc in (self.worker, self.master):
            for stat in descendants(proc.pid):
                self.seen.setdefault(stat.pid, stat)
        for proc in (self.worker, self.master):
            stop_group(proc)
        for stat in self.seen.values():
            if same_process_alive(stat):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(stat.pid, signal.SIGKILL)
        survivors = list(self.seen.values())
        if not wait_until(
            lambda: not any(same_process_alive(stat) for stat in survivors), STOP_DEADLINE
        ):
            left = [s.pid for s in survivors if same_process_alive(s)]
            raise ClusterStopError(f"processes of the Spark cluster survived SIGKILL: {left}")


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group `proc` leads, SIGKILL if `proc` outlives `STOP_DEADLINE`;
    then SIGKILL to whatever is left in the group."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_DEADLINE)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait(STOP_DEADLINE)
    signal_group(proc.pid, signal.SIGKILL)


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def check_hidden(tmp_dir: Path, hidden: Sequence[Path]) -> list[Path]:
    """The hidden directories, absolute; `ValueError` for one that is not a directory or that
    would hide what the worker needs (its work dir, Spark, Python)."""
    needed = [tmp_dir.resolve(), spark_home().resolve(), Path(sys.executable).resolve()]
    checked = []
    for path in hidden:
        path = path.resolve()
        if not path.is_dir():
            raise ValueError(f"cannot hide {path}: not a directory")
        for need in needed:
            if need == path or path in need.parents:
                raise ValueError(f"hiding {path} would hide {need}, which the worker needs")
        checked.append(path)
    return checked


def launch(
    command: Sequence[str], log: Path, env: Mapping[str, str], cwd: Path
) -> subprocess.Popen[bytes]:
    """Start a daemon in a session of its own (its process group is what `stop` signals)."""
    with log.open("ab") as out:
        out.write(f"--- {shlex.join(command)}\n".encode())
        out.flush()
        return subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


@contextlib.contextmanager
def standalone_cluster(
    tmp_dir: Path, hidden: Sequence[Path], *, cores: int = 2, memory: str = "1g"
) -> Iterator[SparkCluster]:
    """A master and a worker (`cores` cores, `memory` for executors) whose executors cannot see
    the `hidden` directories; stopped, with everything they started, on exit."""
    tmp_dir = tmp_dir.resolve()
    tmp_dir.mkdir(parents=True, exist_ok=True)
    hidden = check_hidden(tmp_dir, hidden)
    work_dir = tmp_dir / "worker"
    work_dir.mkdir(exist_ok=True)
    env = daemon_env(tmp_dir)
    local_dirs = tmp_dir / "local"  # executors' scratch space (shuffle, blocks)
    local_dirs.mkdir(exist_ok=True)
    env["SPARK_LOCAL_DIRS"] = str(local_dirs)
    env["SPARK_MASTER_OPTS"] = MASTER_OPTS
    env["SPARK_WORKER_OPTS"] = DAEMON_OPTS
    master_port, master_ui_port, worker_port, worker_ui_port = (free_port() for _ in range(4))
    master_url = f"spark://{HOST}:{master_port}"
    launcher = str(spark_class())
    master_cmd = [launcher, MASTER_CLASS, "--host", HOST]
    master_cmd += ["--port", str(master_port), "--webui-port", str(master_ui_port)]
    worker_cmd = [launcher, WORKER_CLASS, master_url, "--host", HOST, "--port", str(worker_port)]
    worker_cmd += ["--webui-port", str(worker_ui_port), "--cores", str(cores)]
    worker_cmd += ["--memory", memory, "--work-dir", str(work_dir)]
    master_log, worker_log = tmp_dir / "master.log", tmp_dir / "worker.log"
    master = launch(master_cmd, master_log, env, tmp_dir)
    worker: subprocess.Popen[bytes] | None = None
    try:
        worker = launch(hiding_command(hidden, worker_cmd), worker_log, env, work_dir)
        cluster = SparkCluster(
            master_url=master_url,
            master_ui=f"http://{HOST}:{master_ui_port}",
            master_log=master_log,
            worker_log=worker_log,
            work_dir=work_dir,
            tmp_dir=tmp_dir,
            cores=cores,
            memory=memory,
            master=master,
            worker=worker,
        )
    except BaseException:
        for proc in (worker, master):
            if proc is not None:
                stop_group(proc)
        raise
    try:
        wait_ready(cluster, worker_port)
        yield cluster
    finally:
        cluster.stop()


def wait_ready(cluster: SparkCluster, worker_port: int, timeout: float = START_DEADLINE) -> None:
    """Poll the master's JSON until it lists our worker as ALIVE (see the module docstring)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in (("master", cluster.master), ("worker", cluster.worker)):
            if proc.poll() is not None:
                raise ClusterStartError(
                    f"the Spark {name} exited with {proc.returncode} during start\n"
                    + cluster.log_tail()
                )
        if any(w.get("port") == worker_port for w in cluster.alive_workers()):
            return
        time.sleep(0.2)
    raise ClusterStartError(
        f"no ALIVE worker at {cluster.master_ui}/json/ within {timeout} s\n" + cluster.log_tail()
    )
