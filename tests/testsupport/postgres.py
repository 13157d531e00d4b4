"""`PostgresServer`: a real PostgreSQL server for the tests, on loopback, in a temporary directory.

Theory of operation
-------------------
The PostgreSQL store (`telemq.store.postgres`) is tested against the real thing: ``initdb`` and
``pg_ctl`` from the machine's PostgreSQL (Debian's ``postgresql`` package, which
``bash scripts/bootstrap.sh --test`` installs, puts them in
``/usr/lib/postgresql/<version>/bin``, not on the PATH: `find_programs` looks there too, newest
version first). Missing, they fail the test that asked for a server (`require`), never skip it.

One server per test process (`postgres_server`, session-scoped: each pytest-xdist worker
starts its own), started on first use:

- in a directory of its own under the system's temporary directory (pytest's are private to
  root, and the server does not run as root), removed at the end;
- as a user other than root when the tests run as root (PostgreSQL refuses to run as root):
  Debian's ``postgres`` system user, else ``nobody``, which then owns the directory; the
  programs run under ``runuser -u USER --``;
- listening on 127.0.0.1 on a port from `free_port` (the worker's own slice of ports), and on
  a unix socket in its directory, never the system's ``/var/run/postgresql``;
- with the default fsync settings: what the tests measure is what an installation does
  (only ``initdb`` and ``pg_basebackup`` skip flushing the files they write to a throw-away
  directory, and a replica's start flushes them with one ``syncfs``: seconds less per server
  on a loaded machine);
- its superuser `SUPERUSER`, whose password (`password`, random per server) TCP clients must
  give (``scram-sha-256``), while the unix socket trusts the local user for the support code's
  own administration.

Each test gets a database of its own (`database`: ``CREATE DATABASE``, dropped after the test
with ``WITH (FORCE)``, so a broker the test killed cannot hold it), so tests stay independent.
`stop` is ``pg_ctl stop -m fast``.

For the tests of faults (tests/store/test_ha_faults.py), on servers of their own: `pause` and
`start_again` stop and start a server on the same data and port; `crash` SIGKILLs the
postmaster and every process it started (the crash of the server's machine); `replica`
makes and starts a streaming replica (``pg_basebackup -R`` over the unix socket, its
``cluster_name`` `REPLICA_NAME` for ``synchronous_standby_names``) and `promote` makes it
the primary.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .process import HOST, free_port, unique
from .requirements import BOOTSTRAP, require

SUPERUSER = "telemq_test"
REPLICA_NAME = "telemq_replica"
DEBIAN_LIB = Path("/usr/lib/postgresql")
START_DEADLINE = 60.0
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def find_programs() -> tuple[Path | None, str | None]:
    """The directory holding ``initdb`` and ``pg_ctl``, or None and why not: on the PATH, or
    in Debian's ``/usr/lib/postgresql/<version>/bin`` (the newest version)."""
    initdb = shutil.which("initdb")
    if initdb is not None and shutil.which("pg_ctl") is not None:
        return Path(initdb).resolve().parent, None
    versions: list[tuple[int, Path]] = []
    if DEBIAN_LIB.is_dir():
        for entry in DEBIAN_LIB.iterdir():
            if entry.name.isdigit() and (entry / "bin" / "initdb").is_file():
                versions.append((int(entry.name), entry / "bin"))
    if versions:
        bindir = max(versions)[1]
        if (bindir / "pg_ctl").is_file():
            return bindir, None
    return None, f"no initdb and pg_ctl on the PATH nor in {DEBIAN_LIB}/<version>/bin"


def _server_user() -> str | None:
    """Who runs the server: None for the current user unless that is root (PostgreSQL refuses
    root), else Debian's `postgres` user, or `nobody`."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    return None


class PostgresServer:
    """One PostgreSQL server in a temporary directory (see the module docstring)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.user = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="telemq-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.password = secrets.token_hex(12)
        self.started = False

    # -- running the programs -----------------------------------------------------------

    def _as_server_user(self, command: list[str]) -> list[str]:
        if self.user is None:
            return command
        return ["runuser", "-u", self.user, "--", *command]

    def _run(self, command: list[str], what: str) -> None:
        done = subprocess.run(
            self._as_server_user(command),
            capture_output=True,
            text=True,
            timeout=START_DEADLINE,
            cwd=self.root,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{what} failed ({done.returncode}): {done.stdout}{done.stderr}{self.log_tail()}"
            )

    def start(self) -> None:
        self.socket_dir.mkdir()
        password_file = self.root / "superuser.password"
        password_file.write_text(self.password + "\n", encoding="utf-8")
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            for path in (self.root, self.socket_dir, password_file):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                f"--pwfile={password_file}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-instructions",
                "--no-sync",  # a throw-away directory; the server itself fsyncs as usual
            ],
            "initdb",
        )
        password_file.unlink()
        self.start_again()

    def start_again(self, *options: str) -> None:
        """``pg_ctl start`` on the existing data directory (after `start`, `pause`, or as a
        replica), with extra ``-c name=value`` `options`; waits until it accepts
        connections."""
        settings = (
            f"-c listen_addresses={HOST} -p {self.port} -k {self.socket_dir}"
            " -c max_connections=200 -c log_min_messages=warning"
        )
        settings = " ".join((settings, *options))
        self._run(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                settings,
                "-w",
                "-t",
                str(int(START_DEADLINE)),
                "start",
            ],
            "pg_ctl start",
        )
        self.started = True

    def pause(self) -> None:
        """``pg_ctl stop -m fast`` (every session ended), keeping the data for
        `start_again`."""
        if self.started:
            self._run(
                [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop"],
                "pg_ctl stop",
            )
            self.started = False

    def stop(self) -> None:
        try:
            self.pause()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def crash(self) -> None:
        """SIGKILL the postmaster and every server process it started, as the crash of the
        server's machine would end them (a backend of a killed postmaster would otherwise
        linger until it noticed)."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        children = [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _parent(entry) == pid
        ]
        for victim in (pid, *children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_alive(victim) for victim in (pid, *children)):
            if time.monotonic() > deadline:
                raise RuntimeError("the PostgreSQL server survived SIGKILL")
            time.sleep(0.02)
        self.started = False

    def replica(self) -> PostgresServer:
        """A streaming replica of this server, started: ``pg_basebackup -R`` over the
        unix socket (its ``primary_conninfo`` too), a port of its own, hot standby. Its
        ``cluster_name`` (`REPLICA_NAME`) is what it is called in
        ``synchronous_standby_names``."""
        replica = PostgresServer(self.bindir)
        replica.password = self.password
        replica.socket_dir.mkdir()
        if replica.user is not None:
            entry = pwd.getpwnam(replica.user)
            for path in (replica.root, replica.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        try:
            replica._run(
                [
                    str(self.bindir / "pg_basebackup"),
                    "-D",
                    str(replica.data),
                    "-h",
                    str(self.socket_dir),
                    "-p",
                    str(self.port),
                    "-U",
                    SUPERUSER,
                    "-X",
                    "stream",
                    "-R",
                    "-c",
                    "fast",
                    "--no-sync",
                ],
                "pg_basebackup",
            )
            replica.start_again(
                f"-c cluster_name={REPLICA_NAME}", "-c recovery_init_sync_method=syncfs"
            )
        except BaseException:
            replica.stop()
            raise
        return replica

    def promote(self) -> None:
        """``pg_ctl promote -w``: this replica becomes a primary."""
        self._run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "promote"],
            "pg_ctl promote",
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            tail = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return "\n--- PostgreSQL log ---\n" + "\n".join(tail)

    # -- connecting -----------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres", *, password: bool = True) -> str:
        """A libpq connection string to `dbname` over TCP, as the superuser (with its
        password unless `password` is false)."""
        dsn = f"host={HOST} port={self.port} user={SUPERUSER} dbname={dbname}"
        return f"{dsn} password={self.password}" if password else dsn

    def admin(self, sql: str, params: tuple[Any, ...] = (), dbname: str = "postgres") -> list[Any]:
        """Run one statement (autocommit) over the unix socket; its rows, if any."""
        import psycopg

        conninfo = f"host={self.socket_dir} port={self.port} user={SUPERUSER} dbname={dbname}"
        with psycopg.connect(conninfo, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []

    def create_database(self, name: str | None = None) -> str:
        name = name or unique("db").lower()
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a plain database name: {name!r}")
        self.admin(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a plain database name: {name!r}")
        deadline = time.monotonic() + 10
        while True:
            try:
                self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A new database for one test, dropped afterwards; yields its name."""
        name = self.create_database()
        try:
            yield name
        finally:
            self.drop_database(name)


def _parent(proc: Path) -> int:
    """The parent pid in ``/proc/PID/stat`` (0 when the process is gone)."""
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_server() -> PostgresServer:
    """A started server; fails the calling test when PostgreSQL or psycopg is missing."""
    bindir, problem = find_programs()
    require("PostgreSQL (Debian's postgresql: initdb, pg_ctl)", problem)
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        require("psycopg (the `postgres` extra)", str(exc), fix=BOOTSTRAP)
    assert bindir is not None
    server = PostgresServer(bindir)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server
