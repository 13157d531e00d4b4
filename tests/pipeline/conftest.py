"""Fixtures for the pipeline tests (the Spark session is the suite's shared ``spark``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from telemq.cli.demo import BrokerThread

from .helpers import start_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerThread, int, Path]]:
    """A live broker for one test: ``(thread, port, data_dir)``."""
    data = tmp_path / "broker-data"
    thread = start_broker(data)
    try:
        yield thread, thread.port, data
    finally:
        thread.stop()
