"""Links form a tree: a link that would close a cycle is refused, with an ERROR naming the
cycle, whether the brokers start one after another or all at once (docs/network.md §4)."""

from __future__ import annotations

import re
from pathlib import Path

from testsupport.paho import sys_value
from testsupport.process import wait_until

from .netsupport import LINK_TIMEOUT, Network, wait_link_state

TRIANGLE = [("A", "B"), ("B", "C"), ("C", "A")]
LINKS = [("A", "B"), ("B", "A"), ("B", "C"), ("C", "B"), ("C", "A"), ("A", "C")]


def states(network: Network) -> dict[tuple[str, str], str]:
    return {
        (broker, link): sys_value(network.ports[broker], f"$SYS/broker/links/{link}/state", 1.0)
        or ""
        for broker, link in LINKS
    }


def settled(network: Network) -> bool:
    """Exactly two links of the triangle are up, each at both ends; the third at neither."""
    now = states(network)
    pairs = [("A", "B"), ("B", "C"), ("C", "A")]
    up = [now[(a, b)] == "connected" and now[(b, a)] == "connected" for a, b in pairs]
    half = [(now[(a, b)] == "connected") != (now[(b, a)] == "connected") for a, b in pairs]
    return sum(up) == 2 and not any(half)


def named_cycle(line: str) -> set[str]:
    """The brokers of the cycle a refusal names: `... the cycle X - Y - Z - X ...`."""
    found = re.search(r"the cycle (\w+) - (\w+) - (\w+) - (\w+)", line)
    assert found is not None and found.group(1) == found.group(4), line
    return set(found.groups())


def cycle_lines(network: Network) -> list[str]:
    return [
        line
        for broker in network.brokers.values()
        for line in broker.log_text().splitlines()
        if "would close the cycle" in line
    ]


def test_the_link_that_closes_a_cycle_is_refused_when_brokers_start_in_turn(
    tmp_path: Path,
) -> None:
    network = Network(tmp_path, ["A", "B", "C"], TRIANGLE)
    try:
        network.start(["A", "B"])
        assert wait_link_state(network, "A", "B", "connected")
        network.start(["C"])
        # The third link is refused when it tries (it may be waiting to retry at first).
        assert wait_until(lambda: bool(cycle_lines(network)), LINK_TIMEOUT, 0.3), states(network)
        assert wait_until(lambda: settled(network), LINK_TIMEOUT, 0.3), states(network)
        assert states(network)[("A", "B")] == "connected"
        lines = cycle_lines(network)
        assert all(named_cycle(line) == {"A", "B", "C"} for line in lines), lines
    finally:
        network.finalize()


def test_a_triangle_started_at_once_keeps_two_links(tmp_path: Path) -> None:
    network = Network(tmp_path, ["A", "B", "C"], TRIANGLE)
    try:
        for broker in network.brokers.values():
            broker.start(wait=False)
        for broker in network.brokers.values():
            broker.wait_ready()
        assert wait_until(lambda: bool(cycle_lines(network)), LINK_TIMEOUT, 0.3), states(network)
        assert wait_until(lambda: settled(network), LINK_TIMEOUT, 0.3), states(network)
    finally:
        network.finalize()
