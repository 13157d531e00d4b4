"""A link refused as a cycle, in the logs: at most one line an hour on each side however
often the neighbour dials again, and a line that names the right link (docs/network.md
§3-4)."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

import pytest

from testsupport.process import wait_until
from testsupport.relay import Relay

from . import netsupport
from .netsupport import LINK_TIMEOUT, Network, wait_link_state

TRIANGLE = [("A", "B"), ("B", "C"), ("C", "A")]
CYCLE = "would close the cycle"
LEVEL = re.compile(r" (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


class HoldingRelay(Relay):
    """A `Relay` that can hold what goes one way (`to_target`: from the dialing broker;
    `to_dialer`: back) until released: bytes wait, in order, none is lost."""

    def __init__(self, target_port: int) -> None:
        self.to_target = threading.Event()
        self.to_dialer = threading.Event()
        self.to_target.set()
        self.to_dialer.set()
        super().__init__(target_port)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        gate = self.to_target if source in self._dialing_ends else self.to_dialer
        try:
            while data := source.recv(65536):
                gate.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(source, sink)

    def close(self) -> None:
        self.to_target.set()
        self.to_dialer.set()
        super().close()


@pytest.fixture
def triangle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Network:
    """A triangle whose three links go through `HoldingRelay`s (A dials B, B dials C, C
    dials A), not started."""
    monkeypatch.setattr(netsupport, "Relay", HoldingRelay)
    return Network(tmp_path, ["A", "B", "C"], TRIANGLE, relayed=TRIANGLE)


def relay(network: Network, edge: tuple[str, str]) -> HoldingRelay:
    found = network.relays[edge]
    assert isinstance(found, HoldingRelay)
    return found


def logged(network: Network, broker: str, words: str) -> list[str]:
    """The lines of `broker`'s log at INFO or above that contain `words`."""
    return [
        line
        for line in network.brokers[broker].log_text().splitlines()
        if words in line and (found := LEVEL.search(line)) and found.group(1) != "DEBUG"
    ]


def test_a_link_refused_as_a_cycle_is_logged_once_on_each_side(triangle: Network) -> None:
    """B dials C, and C, which reaches B through A, refuses it on every attempt: the
    dialer's WARNING and the acceptor's ERROR come once, the connections' ends at DEBUG."""
    refused = relay(triangle, ("B", "C"))
    refused.blocked = True
    try:
        triangle.start()
        for broker, link in (("A", "B"), ("B", "A"), ("C", "A"), ("A", "C")):
            assert wait_link_state(triangle, broker, link, "connected"), (broker, link)
        refused.blocked = False
        assert wait_link_state(triangle, "B", "C", "refused: cycle")
        attempts = refused.connections
        # reconnect_max = 1 s: five more attempts, each refused the same way.
        assert wait_until(lambda: refused.connections >= attempts + 5, 4 * LINK_TIMEOUT, 0.2)
        assert wait_link_state(triangle, "B", "C", "refused: cycle")
        at_b = logged(triangle, "B", CYCLE)
        at_c = logged(triangle, "C", CYCLE)
        assert len(at_b) == 1, at_b
        assert " WARNING " in at_b[0] and "link 'C' refused by" in at_b[0], at_b
        assert len(at_c) == 1, at_c
        assert " ERROR " in at_c[0] and "link 'B' refused" in at_c[0], at_c
        assert logged(triangle, "A", CYCLE) == []
        assert logged(triangle, "C", "link from") == []
    finally:
        triangle.finalize()


def test_a_link_dropped_by_the_tie_break_is_named_in_its_line(triangle: Network) -> None:
    """Links that came up together close a cycle that B finds in a reach update over link
    A; the tie-break drops B's other link, C, and the line names C going first round the
    cycle, as the link through which something is reached twice: 'C' through link 'A'."""
    a_to_b = relay(triangle, ("A", "B"))
    b_to_c = relay(triangle, ("B", "C"))
    c_to_a = relay(triangle, ("C", "A"))
    b_to_c.blocked = True
    c_to_a.blocked = True
    try:
        triangle.start()
        assert wait_link_state(triangle, "A", "B", "connected")
        assert wait_link_state(triangle, "B", "A", "connected")
        # From now on B hears nothing from A, and C nothing from A: C's link to A stays
        # "connecting" at C (A's reach is held), but is up at A.
        a_to_b.to_target.clear()
        c_to_a.to_dialer.clear()
        c_to_a.blocked = False
        assert wait_link_state(triangle, "A", "C", "connected")
        # B dials C: C reaches nothing else yet, so it accepts; B reaches only A.
        b_to_c.blocked = False
        assert wait_link_state(triangle, "B", "C", "connected")
        assert wait_link_state(triangle, "C", "B", "connected")
        # A's news reaches B: A reaches C, which B reaches through link C: a cycle, and
        # B - C, the last pair, is the link to drop (B is one of its ends).
        a_to_b.to_target.set()
        assert wait_until(lambda: bool(logged(triangle, "B", CYCLE)), LINK_TIMEOUT, 0.2)
        line = logged(triangle, "B", CYCLE)[0]
        found = re.search(
            r"link '(\w+)' refused: it would close the cycle ((?:\w+ - )+\w+) "
            r"\('(\w+)' is already reachable through link '(\w+)'\)",
            line,
        )
        assert found is not None, line
        link, cycle, known, through = found.groups()
        brokers = cycle.split(" - ")
        assert link == "C", line
        assert brokers[0] == brokers[-1] == "B", line
        assert brokers[1] == link, f"the refused link goes first round the cycle: {line}"
        assert through == brokers[-2] != link, f"reached through the other link: {line}"
        assert known in brokers[1:-1], line
        assert (cycle, known, through) == ("B - C - A - B", "C", "A"), line
    finally:
        c_to_a.to_dialer.set()
        triangle.finalize()
