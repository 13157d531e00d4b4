"""Fixtures of the network tests: a chain of broker subprocesses with its links up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .netsupport import Network, wait_link_state


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Network]:
    """A - B - C, A dialing B and B dialing C, both links up; stopped at the end."""
    network = Network(tmp_path, ["A", "B", "C"], [("A", "B"), ("B", "C")])
    try:
        network.start()
        for broker, link in (("A", "B"), ("C", "B")):
            assert wait_link_state(network, broker, link, "connected"), (broker, link)
        yield network
    finally:
        network.finalize()
