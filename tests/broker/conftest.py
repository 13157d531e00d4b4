"""Fixtures for the black-box broker tests: broker subprocesses and clients that clean up;
and for the in-process tests of what the broker writes, a store of each kind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from telemq.store import MemoryStore, SqliteStore, Store, SyncMode
from testsupport.raw5 import raw5 as raw5

from .helpers import (
    LIVE_BROKERS,
    BrokerProcess,
    PahoClient,
    RawClient,
    raw_connected,
)

BrokerFactory = Callable[..., BrokerProcess]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the stderr of every running broker to a failing test's report."""
    report = yield
    if report.failed:
        for broker in LIVE_BROKERS:
            report.sections.append((f"broker stderr ({broker.workdir.name})", broker.log_tail(200)))
    return report


def _factory(base: Path) -> tuple[BrokerFactory, list[BrokerProcess]]:
    started: list[BrokerProcess] = []

    def make(
        *args: str,
        config: Path | None = None,
        start: bool = True,
        **kwargs: Any,
    ) -> BrokerProcess:
        broker = BrokerProcess(
            base / f"broker{len(started)}", args=list(args), config=config, **kwargs
        )
        started.append(broker)
        if start:
            broker.start()
        return broker

    return make, started


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start brokers with custom arguments; every one is stopped at the end of the test."""
    make, started = _factory(tmp_path)
    yield make
    for broker in started:
        broker.finalize()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker (SQLite store, defaults) shared by the tests of a module."""
    make, started = _factory(tmp_path_factory.mktemp("shared"))
    yield make()
    for b in started:
        b.finalize()


@pytest.fixture
def port(broker: BrokerProcess) -> int:
    return broker.port


@pytest.fixture
def paho_factory() -> Iterator[Callable[..., PahoClient]]:
    """Create paho clients (not yet connected) that are closed at the end of the test."""
    clients: list[PahoClient] = []

    def make(port: int, client_id: str | None = None, **kwargs: Any) -> PahoClient:
        client = PahoClient(port, client_id, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        try:
            client.disconnect()
        except Exception:
            client.client.loop_stop()


@pytest.fixture
def paho_client(paho_factory: Callable[..., PahoClient]) -> Callable[..., PahoClient]:
    """Create a connected paho client: ``paho_client(port, client_id=None, **options)``."""

    def make(port: int, client_id: str | None = None, **kwargs: Any) -> PahoClient:
        client = paho_factory(port, client_id, **kwargs)
        client.connect()
        return client

    return make


@pytest.fixture
def raw_factory() -> Iterator[Callable[..., RawClient]]:
    """Open raw MQTT sockets; ``raw(port)`` is unconnected, ``raw(port, client_id=...)`` is
    connected and accepted. All are closed at the end of the test."""
    clients: list[RawClient] = []

    def make(port: int, *, connected: bool = False, **kwargs: Any) -> RawClient:
        client = raw_connected(port, **kwargs) if connected else RawClient(port)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture(params=["memory", "sqlite"])
def store_of_each_kind(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A memory store, then a SQLite file: what the broker writes must load back from both."""
    if request.param == "memory":
        return MemoryStore()
    return SqliteStore(tmp_path / "telemq.db", SyncMode.NORMAL)
