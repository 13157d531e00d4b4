"""The PostgreSQL store's tables, their version, their migrations and the id counters.

Theory of operation
-------------------
The tables are the SQLite store's (sqlite_schema.py), column for column and in the same
order (`_codec.COLUMNS`), with PostgreSQL's types: ``bigint`` ids and times, ``integer``
flags and small numbers, ``bytea`` payloads and properties, ``double precision`` expiry
times, ``text`` names and ``data`` (the JSON text the codec writes, kept as text so that it
reads back exactly as written). Their CHECK constraints are the SQLite schema's; where
PostgreSQL would convert a value SQLite refuses (text into ``bytea``), the store applies the
codec's twins in Python before it writes (postgres_writes.py), as the memory store does.
Names and keys are ``COLLATE "C"``: byte order, which is code point order in UTF-8, as in
SQLite and Python, so `load` returns lists in the same order as the other stores, whatever
the database's default collation.

Versions. `telemq_schema` holds one row, the version of the tables (`SCHEMA_VERSION`).
`migrate` runs at every start, in one transaction (PostgreSQL's DDL is transactional, so a
failed migration leaves the old tables as they were), under the store's lock: it creates the
tables of a new database, brings an older version up step by step (`_STEPS[n]` takes
version n to n + 1), and refuses a version newer than this code, whose meaning it cannot
know, with `NewerSchema`, before it touches anything.

Identifiers are never reused: as in SQLite, `meta` keeps high-water marks for the ids whose
largest rows are gone, `RAISE_MARK` raises them, and `next_ids` is past both the marks and
the largest ids stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import StoreError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "NO_MARKS",
    "RAISE_MARK",
    "ROW_KEYS",
    "SCHEMA_VERSION",
    "TABLES",
    "NewerSchema",
    "migrate",
    "next_ids",
    "read_marks",
    "schema_version",
]

SCHEMA_VERSION = 1
# 1: the tables of SQLite schema 7.

TABLES = (
    "meta",
    "sessions",
    "subscriptions",
    "retained",
    "messages",
    "deliveries",
    "incoming",
    "journal",
    "consumers",
    "quarantine",
)

# What names one row of each table (to quarantine it): its primary key.
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("client_id",),
    "subscriptions": ("client_id", "key"),
    "retained": ("sub_point", "topic"),
    "messages": ("id",),
    "deliveries": ("delivery_id",),
    "incoming": ("client_id", "packet_id"),
}

_C = 'COLLATE "C"'
_FLAG = "integer NOT NULL CHECK ({0} IN (0, 1))"
_QOS = "integer NOT NULL CHECK (qos BETWEEN 0 AND 2)"
_EXPIRY = "double precision CHECK (expiry_at >= 0 AND expiry_at <> 'NaN')"

# Version 1, as a new database gets it.
_CREATE = [
    """CREATE TABLE meta (
    key text PRIMARY KEY,
    value bigint NOT NULL
)""",
    "INSERT INTO meta (key, value)"
    " VALUES ('next_seq', 1), ('next_message_id', 1), ('next_delivery_id', 1)",
    f"""CREATE TABLE sessions (
    client_id text {_C} PRIMARY KEY,
    data text
)""",
    f"""CREATE TABLE subscriptions (
    client_id text {_C} NOT NULL,
    key text {_C} NOT NULL,
    data text,
    PRIMARY KEY (client_id, key)
)""",
    f"""CREATE TABLE retained (
    sub_point text {_C} NOT NULL,
    topic text {_C} NOT NULL,
    payload bytea NOT NULL,
    qos {_QOS},
    ts_us bigint NOT NULL,
    data text,
    properties bytea,
    local_only integer CHECK (local_only IN (0, 1)),
    PRIMARY KEY (sub_point, topic)
)""",
    f"""CREATE TABLE messages (
    id bigint PRIMARY KEY,
    topic text NOT NULL,
    payload bytea NOT NULL,
    qos {_QOS},
    retain {_FLAG.format("retain")},
    sub_point text NOT NULL,
    client_id text NOT NULL,
    user_id text NOT NULL,
    ts_us bigint NOT NULL,
    properties bytea,
    expiry_at {_EXPIRY}
)""",
    f"""CREATE TABLE deliveries (
    delivery_id bigint PRIMARY KEY,
    client_id text {_C} NOT NULL,
    message_id bigint NOT NULL,
    qos {_QOS},
    state integer NOT NULL CHECK (state BETWEEN 0 AND 2),
    packet_id integer NOT NULL CHECK (packet_id BETWEEN 0 AND 65535),
    retain {_FLAG.format("retain")},
    data text
)""",
    "CREATE INDEX deliveries_by_client ON deliveries (client_id)",
    f"""CREATE TABLE incoming (
    client_id text {_C} NOT NULL,
    packet_id integer NOT NULL CHECK (packet_id BETWEEN 1 AND 65535),
    message_id bigint NOT NULL,
    topic text NOT NULL,
    payload bytea NOT NULL,
    qos {_QOS},
    retain {_FLAG.format("retain")},
    sub_point text NOT NULL,
    msg_client_id text NOT NULL,
    user_id text NOT NULL,
    ts_us bigint NOT NULL,
    properties bytea,
    expiry_at {_EXPIRY},
    released {_FLAG.format("released")} DEFAULT 0,
    PRIMARY KEY (client_id, packet_id)
)""",
    f"""CREATE TABLE journal (
    seq bigint PRIMARY KEY,
    ts_us bigint NOT NULL,
    topic text NOT NULL,
    sub_point text NOT NULL,
    qos {_QOS},
    retain {_FLAG.format("retain")},
    payload bytea NOT NULL,
    client_id text NOT NULL,
    user_id text NOT NULL,
    properties bytea,
    origin text
)""",
    f"""CREATE TABLE consumers (
    name text {_C} PRIMARY KEY,
    owner text NOT NULL,
    committed_seq bigint,
    running integer NOT NULL CHECK (running IN (0, 1)),
    updated_us bigint NOT NULL
)""",
    """CREATE TABLE quarantine (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_name text NOT NULL,
    row_json text NOT NULL,
    reason text NOT NULL,
    ts_us bigint NOT NULL
)""",
]

# Migrations: _STEPS[n] takes the tables from version n to n + 1 (none yet).
_STEPS: dict[int, list[str]] = {}


class NewerSchema(StoreError):
    """The database's tables are of a version newer than this telemq understands."""


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    """The version of the tables in the connection's search path; None when there are none."""
    row = conn.execute("SELECT to_regclass('telemq_schema') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return None
    found = conn.execute("SELECT max(version) FROM telemq_schema").fetchone()
    return None if found is None or found[0] is None else int(found[0])


def check_version(version: int | None) -> None:
    """Refuse tables newer than this code (`NewerSchema`)."""
    if version is not None and version > SCHEMA_VERSION:
        raise NewerSchema(
            f"the postgres store has schema version {version}, newer than this telemq"
            f" understands ({SCHEMA_VERSION}); refusing to touch it (upgrade telemq)"
        )


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Create or bring the tables to `SCHEMA_VERSION` in one transaction (see the module
    docstring); returns the version found (0: a new database). The caller holds the lock."""
    with conn.transaction():
        version = schema_version(conn)
        check_version(version)
        if version is None:
            for sql in _CREATE:
                conn.execute(sql.encode())
            conn.execute(b"CREATE TABLE telemq_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO telemq_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
            return 0
        for step in range(version, SCHEMA_VERSION):
            for sql in _STEPS[step]:
                conn.execute(sql.encode())
        if version != SCHEMA_VERSION:
            conn.execute("UPDATE telemq_schema SET version = %s", (SCHEMA_VERSION,))
        return version


NO_MARKS = {"next_seq": 1, "next_message_id": 1, "next_delivery_id": 1}
RAISE_MARK = "UPDATE meta SET value = GREATEST(value, %s) WHERE key = %s"  # (value, key)
_MAXIMA = (
    "SELECT (SELECT max(seq) FROM journal), (SELECT max(id) FROM messages),"
    " (SELECT max(message_id) FROM incoming), (SELECT max(delivery_id) FROM deliveries)"
)


def read_marks(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """The high-water marks kept in `meta` (the defaults for any not there)."""
    marks = dict(NO_MARKS)
    for key, value in conn.execute("SELECT key, value FROM meta").fetchall():
        if key in marks and isinstance(value, int):
            marks[key] = value
    return marks


def next_ids(conn: psycopg.Connection[Any], marks: dict[str, int]) -> dict[str, int]:
    """Next ids: past both the high-water marks and the largest ids stored."""
    counters = dict(marks)
    row = conn.execute(_MAXIMA).fetchone()
    assert row is not None
    seq, message, held, delivery = row
    for key, top in (
        ("next_seq", seq),
        ("next_message_id", message),
        ("next_message_id", held),
        ("next_delivery_id", delivery),
    ):
        if isinstance(top, int):
            counters[key] = max(counters[key], top + 1)
    return counters
