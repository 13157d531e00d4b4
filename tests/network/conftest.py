"""Fixtures of the network tests: a chain of broker subprocesses with its links up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .netsupport import Network, wait_link_state


def running_chain(tmp_path: Path, extra: str = "") -> Iterator[Network]:
    """A - B - C, A dialing B and B dialing C, both links up, with `extra` configuration
    (users) on each broker; stopped at the end. Fixtures yield from it."""
    network = Network(tmp_path, ["A", "B", "C"], [("A", "B"), ("B", "C")], extra=extra)
    try:
        network.start()
        for broker, link in (("A", "B"), ("C", "B")):
            assert wait_link_state(network, broker, link, "connected"), (broker, link)
        yield network
    finally:
        network.finalize()


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Network]:
    """A - B - C with both links up (`running_chain`)."""
    yield from running_chain(tmp_path)
