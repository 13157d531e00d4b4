"""Fixtures for the MQ command-model tests: broker subprocesses and paho clients that clean up.

Each test module starts the broker(s) it needs once (``start_broker``) and shares them between
its tests, which use unique queue names and topics so that they do not interfere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from .helpers import FORMS, LIVE_BROKERS, BrokerProcess, MQClient

ClientFactory = Callable[..., MQClient]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the stderr of every running broker to a failing test's report."""
    report = yield
    if report.failed:
        for broker in LIVE_BROKERS:
            report.sections.append((f"broker stderr ({broker.workdir.name})", broker.log_tail()))
    return report


def start_broker(
    factory: pytest.TempPathFactory,
    config_text: str = "",
    sub_points_of_ports: Sequence[str] = ("",),
) -> BrokerProcess:
    """Start a broker with the given TOML text (listeners are added, one per sub point)."""
    broker = BrokerProcess(
        factory.mktemp("mqbroker"),
        config_text=config_text,
        sub_points_of_ports=sub_points_of_ports,
    )
    return broker.start()


@pytest.fixture(params=FORMS)
def form(request: pytest.FixtureRequest) -> str:
    """The command form under test: XML folders or JSON."""
    return str(request.param)


@pytest.fixture
def clients() -> Iterator[ClientFactory]:
    """``clients(port, client_id=None, connect=True, **options)``: MQ clients closed at the end
    of the test."""
    made: list[MQClient] = []

    def make(
        port: int, client_id: str | None = None, *, connect: bool = True, **kwargs: Any
    ) -> MQClient:
        client = MQClient(port, client_id, **kwargs)
        made.append(client)
        if connect:
            client.connect()
        return client

    yield make
    for client in made:
        try:
            client.close()
        except Exception:
            client.client.loop_stop()
