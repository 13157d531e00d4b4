"""Fixtures for the store tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from store_harness import Harness


@pytest.fixture(params=["memory", "sqlite"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(request.param, tmp_path / "telemq.db")
    yield h
    h.store.close()
