"""Where a PostgreSQL store is and how the broker connects to it: DSN, password, lock.

Theory of operation
-------------------
A `PostgresLocation` is what `[store]` says: a libpq connection string or URI (`dsn`) and,
optionally, a file holding the password (`password_file`). Everything else is libpq's: the
password may also come from the DSN, ``PGPASSWORD`` or ``~/.pgpass`` (``PGPASSFILE``); TLS
from ``sslmode``, ``sslrootcert`` and the other ``ssl*`` keys of the DSN; several hosts
(``host=a,b``) with ``target_session_attrs=read-write`` make libpq try each in turn and keep
the one that accepts writes. This module adds only defaults the DSN does not set: a
``connect_timeout`` (libpq waits for the system's TCP timeout otherwise) and an
``application_name`` naming the broker, which `holder` shows to a second broker.

This module imports psycopg only when it connects, so that the rest of telemq runs without
the ``postgres`` extra.

Every failure becomes a `StoreError` whose message is one line (`one_line`: libpq's messages
span lines, one per host tried) and names the server as the DSN does, without its password
(`describe`).

The lock. Two brokers writing one database would break each other's journal sequence and
ids, so the broker holds a session-level advisory lock (`LOCK_KEY`) on the connection it
commits on for as long as the store is open (`take_lock`). PostgreSQL releases it when that
connection ends, also when the broker is killed (its socket closes) or the server restarts.
A broker that finds it held waits `LOCK_WAIT_S` (the lock of a broker killed a moment ago is
released when its server process notices the closed socket) and then refuses to start:
"the store is in use by another broker", naming the holder's backend. Advisory locks belong
to a database, so one server can hold the stores of many brokers, one database each.

The election (docs/ha.md). Brokers with `[ha]` share one database on purpose: the same lock
elects the active one. A standby connects with `keepalives` (TCP keepalives and a TCP user
timeout, so that a vanished server or network is noticed in seconds, not after the system's
TCP timeout) and tries the lock without waiting (`try_lock`) every poll interval; the
connection that wins it becomes the store's committing connection. `holds_lock` asks the
server whether a connection still holds it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .base import StoreError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "LOCK_KEY",
    "PSYCOPG_EXTRA",
    "PostgresLocation",
    "connect",
    "describe",
    "holder",
    "holds_lock",
    "one_line",
    "take_lock",
    "try_lock",
]

# A fixed 64-bit key, telemq's among the advisory locks of the database.
LOCK_KEY = 0x7465_6C65_6D71_0001  # "telemq", 1
LOCK_WAIT_S = 3.0
PSYCOPG_EXTRA = "pip install 'telemq[postgres]'"
_CONNECT_TIMEOUT_S = 10
_SHOWN_KEYS = ("host", "hostaddr", "port", "dbname", "user")
# With `keepalives`: libpq's TCP keepalives (about 11 s to notice a silent peer) and a TCP
# user timeout (unacknowledged writes fail after 10 s), unless the DSN sets them.
_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
_LOCK_ARGS = ((LOCK_KEY >> 32) & 0xFFFF_FFFF, LOCK_KEY & 0xFFFF_FFFF)


@dataclass(frozen=True, slots=True)
class PostgresLocation:
    """A PostgreSQL store's database: `dsn`, a libpq connection string
    (``host=db port=5432 dbname=telemq user=telemq``) or URI
    (``postgresql://telemq@db/telemq``); `password_file`, a file whose first line is the
    password ("" to leave the password to the DSN, PGPASSWORD or ~/.pgpass as libpq does)."""

    dsn: str
    password_file: str = ""

    def conninfo(self, application: str = "telemq", keepalives: bool = False) -> str:
        """The connection string the store connects with: the DSN, the password from
        `password_file`, and the defaults of the module docstring (with `keepalives`, those of
        an elected connection too). StoreError for a DSN libpq cannot parse or a password
        file that cannot be read."""
        from psycopg import conninfo as pq_conninfo
        from psycopg import errors

        try:
            given = pq_conninfo.conninfo_to_dict(self.dsn)
        except errors.ProgrammingError as exc:
            raise StoreError(f"the postgres store's dsn is not valid: {one_line(exc)}") from None
        extra: dict[str, Any] = {}
        if self.password_file:
            try:
                with open(self.password_file, encoding="utf-8") as handle:
                    password = handle.readline().rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise StoreError(
                    f"cannot read the postgres store's password_file {self.password_file}: {exc}"
                ) from None
            if not password:
                raise StoreError(
                    f"the postgres store's password_file {self.password_file} is empty"
                )
            extra["password"] = password
        if "connect_timeout" not in given:
            extra["connect_timeout"] = _CONNECT_TIMEOUT_S
        if "application_name" not in given:
            extra["application_name"] = application
        if keepalives:
            extra.update({k: v for k, v in _KEEPALIVES.items() if k not in given})
        return pq_conninfo.make_conninfo(self.dsn, **extra)

    def __str__(self) -> str:
        return describe(self.dsn)


def describe(dsn: str) -> str:
    """The server and database a DSN names, never its password: ``host=... dbname=...``."""
    from psycopg import conninfo as pq_conninfo
    from psycopg import errors

    try:
        given = pq_conninfo.conninfo_to_dict(dsn)
    except errors.ProgrammingError:
        return "(a dsn that is not valid)"
    shown = [f"{key}={given[key]}" for key in _SHOWN_KEYS if given.get(key)]
    return " ".join(shown) or "(libpq's defaults)"


def one_line(exc: BaseException) -> str:
    """An error's message on one line: libpq's span lines (one per host it tried, hints
    indented by tabs)."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line) or type(exc).__name__


def connect(
    location: PostgresLocation, *, application: str = "telemq", keepalives: bool = False
) -> psycopg.Connection[Any]:
    """A connection in autocommit mode (the store begins its transactions itself), or
    StoreError naming the server and libpq's reason in one line."""
    import psycopg

    conninfo = location.conninfo(application, keepalives)
    try:
        return psycopg.connect(conninfo, autocommit=True)
    except psycopg.Error as exc:
        reason = one_line(exc)
        hint = ""
        if "no password supplied" in reason:
            hint = " (give it in password_file, the dsn, PGPASSWORD or ~/.pgpass)"
        raise StoreError(
            f"cannot connect to the postgres store ({location}): {reason}{hint}"
        ) from None


def holder(conn: psycopg.Connection[Any]) -> str:
    """Who holds the store's lock, as far as this connection may see: a backend pid and
    the holder's application name and address."""
    row = conn.execute(
        "SELECT a.pid, a.application_name, host(a.client_addr) FROM pg_locks l"
        " JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND l.classid::bigint = %s AND l.objid::bigint = %s",
        _LOCK_ARGS,
    ).fetchone()
    if row is None:
        return "a backend this user cannot see"
    pid, application, address = row
    where = f" from {address}" if address else ""
    return f"PostgreSQL backend {pid}, application {application or '?'!r}{where}"


def take_lock(conn: psycopg.Connection[Any], wait: float = LOCK_WAIT_S) -> None:
    """Hold the store's advisory lock on `conn` (see the module docstring), or raise
    StoreError "the store is in use by another broker"."""
    import psycopg

    deadline = time.monotonic() + wait
    try:
        while True:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
            if row is not None and row[0]:
                return
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"the store is in use by another broker ({holder(conn)}): one broker per"
                    " database"
                )
            time.sleep(0.1)
    except psycopg.Error as exc:
        raise StoreError(f"cannot lock the postgres store: {one_line(exc)}") from None


def try_lock(conn: psycopg.Connection[Any]) -> bool:
    """Take the store's advisory lock on `conn` if it is free (psycopg.Error if the
    connection fails)."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
    return row is not None and bool(row[0])


def holds_lock(conn: psycopg.Connection[Any]) -> bool:
    """Whether `conn`'s own session holds the store's advisory lock, as the server says
    (psycopg.Error if the connection fails)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid()"
        " AND locktype = 'advisory' AND granted AND objsubid = 1"
        " AND classid::bigint = %s AND objid::bigint = %s)",
        _LOCK_ARGS,
    ).fetchone()
    return row is not None and bool(row[0])
