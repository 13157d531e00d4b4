"""The refusal line of a cycle names the link it refuses: whichever of this broker's two
links on the cycle the tie-break drops, the cycle is told through that link first
(`Cycle.seen_from`, docs/network.md §4)."""

from __future__ import annotations

from telemq.network.topology import Cycle, Topology


def test_a_cycle_found_over_one_link_and_dropped_at_the_other_is_told_from_it() -> None:
    b = Topology("B", ["A", "C"])
    b.connect("A", [["A"]])
    b.connect("C", [["C"]])
    cycle = b.update("A", [["A"], ["A", "C"]])  # A - C came up: found over link A
    assert cycle == Cycle(("B", "A", "C"), "C", "C")
    assert b.drops(cycle) == "C"  # B - C sorts last
    assert cycle.message("C") == (
        "link 'C' refused: it would close the cycle B - C - A - B "
        "('C' is already reachable through link 'A')"
    )
    assert cycle.message("A") == (
        "link 'A' refused: it would close the cycle B - A - C - B "
        "('C' is already reachable through link 'C')"
    )


def test_a_longer_cycle_keeps_the_broker_found_again() -> None:
    cycle = Cycle(("B", "A", "X", "C"), "X", "C")
    assert cycle.seen_from("C") == Cycle(("B", "C", "X", "A"), "X", "A")
    assert cycle.seen_from("A") is cycle
    assert "('X' is already reachable through link 'A')" in cycle.message("C")


def test_a_path_back_to_this_broker_told_from_the_other_link() -> None:
    cycle = Cycle(("B", "A", "C"))  # link A announced A, C, B
    assert cycle.seen_from("C") == Cycle(("B", "C", "A"), "C", "A")
    assert cycle.message("C") == (
        "link 'C' refused: it would close the cycle B - C - A - B "
        "('C' is already reachable through link 'A')"
    )
    assert "this broker's own name 'B'" in cycle.message("A")
    two = Cycle(("B", "A"))
    assert two.seen_from("A") is two
