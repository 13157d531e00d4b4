"""Random histories give the same observable results on SqliteStore and PostgresStore.

The histories of test_store_differential.py (colliding ids, invalid values that must fail
the whole batch, trims, loads and restarts), run against both stores side by side: `load`,
the journal and the sizes must agree after every action. Each history gets a PostgreSQL
schema of its own (``search_path`` in the DSN), which also shows that the store lives in
whichever schema the DSN names.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_store_differential import actions, observe, snapshot

from telemq.store import SqliteStore, Store, SyncMode
from telemq.store.postgres import PostgresStore
from testsupport.postgres import PostgresServer

_schemas = itertools.count(1)


# One database for the test, a schema of its own per history: the fixture is shared on purpose.
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(actions, max_size=12))
def test_sqlite_and_postgres_agree(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    postgres_dsn: str,
    history: list[tuple[Any, ...]],
) -> None:
    path = tmp_path_factory.mktemp("history") / "telemq.db"
    schema = f"history_{next(_schemas)}"
    postgres_server.admin(f"CREATE SCHEMA {schema}", dbname=postgres_dsn.split("dbname=")[1])
    dsn = f"{postgres_dsn} options=-csearch_path={schema}"
    sqlite: Store = SqliteStore(path, SyncMode.OFF)
    postgres: Store = PostgresStore(dsn, SyncMode.OFF)
    try:
        for action in history:
            if action[0] == "reopen":
                sqlite.close()
                postgres.close()
                sqlite, postgres = SqliteStore(path, SyncMode.OFF), PostgresStore(dsn, SyncMode.OFF)
                continue
            assert observe(sqlite, action) == observe(postgres, action), action
            assert snapshot(sqlite) == snapshot(postgres)
        assert sqlite.load() == postgres.load()
    finally:
        sqlite.close()
        postgres.close()
