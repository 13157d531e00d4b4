"""Fixtures for the store tests: the store under test (each kind), and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from store_harness import Harness

from testsupport.postgres import PostgresServer, start_server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server per test process (tests/testsupport/postgres.py)."""
    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A database of this test's own on `postgres_server`, dropped afterwards; its DSN."""
    with postgres_server.database() as name:
        yield postgres_server.dsn(name)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else ""
    h = Harness(request.param, tmp_path / "telemq.db", dsn)
    yield h
    h.store.close()
