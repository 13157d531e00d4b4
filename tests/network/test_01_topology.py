"""`network.topology`: paths per link, split horizon, cycle refusal and the tie-break.

Most tests drive one `Topology` by hand with what its neighbours would announce; `Net`
simulates whole networks (one `Topology` per broker, announcements carried in order per
connection, delivered in a random order across connections) to check that links coming up
together end as a tree that every broker sees alike.
"""

from __future__ import annotations

import random
from collections import deque

import pytest

from telemq.network.topology import Cycle, Topology, tie_break


def test_a_chain_is_accepted_and_announced_with_split_horizon() -> None:
    # a - b - c - d, seen from b
    b = Topology("b", ["a", "c"])
    assert b.connect("a", [["a"]]) is None
    assert b.connect("c", [["c"], ["c", "d"]]) is None
    assert b.announcement("a") == [["b"], ["b", "c"], ["b", "c", "d"]]
    assert b.announcement("c") == [["b"], ["b", "a"]]
    assert b.reachable("c") == ["c", "d"]
    assert [b.next_hop(x) for x in ("a", "c", "d", "b", "zz")] == ["a", "c", "c", None, None]


def test_a_star() -> None:
    hub = Topology("hub", ["e1", "e2", "e3"])
    for edge in ("e1", "e2", "e3"):
        assert hub.connect(edge, [[edge]]) is None
    assert hub.announcement("e2") == [["hub"], ["hub", "e1"], ["hub", "e3"]]
    e1 = Topology("e1", ["hub"])
    assert e1.connect("hub", hub.announcement("e1")) is None
    assert e1.reachable("hub") == ["hub", "e2", "e3"]
    assert e1.announcement("hub") == [["e1"]]  # nothing behind e1 but hub itself
    assert {e1.next_hop(x) for x in ("hub", "e2", "e3")} == {"hub"}


def test_next_hop_through_a_chain_of_four() -> None:
    brokers = ["a", "b", "c", "d"]
    net = Net(brokers, [("a", "b"), ("b", "c"), ("c", "d")])
    for pair in net.links:
        net.bring_up([pair])
    assert net.cycles == []
    a, d = net.brokers["a"], net.brokers["d"]
    assert [a.next_hop(x) for x in ("b", "c", "d")] == ["b", "b", "b"]
    assert [d.next_hop(x) for x in ("a", "b", "c")] == ["c", "c", "c"]
    assert a.reachable("b") == ["b", "c", "d"]
    assert net.brokers["b"].announcement("a") == [["b"], ["b", "c"], ["b", "c", "d"]]
    assert net.brokers["b"].announcement("c") == [["b"], ["b", "a"]]


def test_a_triangle_made_link_by_link_refuses_the_third_link() -> None:
    edge1 = Topology("edge-1", ["hub", "edge-2"])
    assert edge1.connect("hub", [["hub"]]) is None
    assert edge1.update("hub", [["hub"], ["hub", "edge-2"]]) is None  # hub - edge-2 came up
    announced = [["edge-2"], ["edge-2", "hub"]]
    cycle = edge1.check("edge-2", announced)
    assert cycle == Cycle(("edge-1", "edge-2", "hub"), "edge-2", "hub")
    assert cycle.message("edge-2") == (
        "link 'edge-2' refused: it would close the cycle edge-1 - edge-2 - hub - edge-1 "
        "('edge-2' is already reachable through link 'hub')"
    )
    assert edge1.connect("edge-2", announced) == cycle
    assert not edge1.connected("edge-2")
    assert edge1.next_hop("edge-2") == "hub"


def test_the_documented_refusal_text() -> None:
    # edge-1 has not heard yet that hub reaches edge-2 when edge-2 dials it.
    edge1 = Topology("edge-1", ["hub", "edge-2"])
    edge1.connect("hub", [["hub"]])
    cycle = edge1.connect("edge-2", [["edge-2"], ["edge-2", "hub"]])
    assert cycle is not None
    assert cycle.message("edge-2") == (
        "link 'edge-2' refused: it would close the cycle edge-1 - edge-2 - hub - edge-1 "
        "('hub' is already reachable through link 'hub')"
    )


def test_a_path_naming_this_broker_is_refused() -> None:
    edge1 = Topology("edge-1", ["x"])
    cycle = edge1.check("x", [["x"], ["x", "y"], ["x", "y", "edge-1"]])
    assert cycle == Cycle(("edge-1", "x", "y"))
    assert cycle.message("x") == (
        "link 'x' refused: it would close the cycle edge-1 - x - y - edge-1 (it announces "
        "this broker's own name 'edge-1': the links form a cycle, or two brokers share a name)"
    )
    assert edge1.connect("x", [["x"], ["x", "edge-1"]]) is not None
    assert not edge1.connected("x")


@pytest.mark.parametrize("seed", range(20))
def test_a_triangle_up_at_once_drops_the_same_link_everywhere(seed: int) -> None:
    net = Net(["a", "b", "c"], [("a", "b"), ("b", "c"), ("a", "c")], random.Random(seed))
    net.bring_up(net.links)
    # Every broker that saw the cycle picked the same link: b - c, the last sorted pair (b or
    # c may find the link closed by the other end before any reach update tells it more).
    assert "a" in {broker for broker, _ in net.cycles}
    assert {pair for _, pair in net.cycles} == {("b", "c")}
    assert net.up() == {("a", "b"), ("a", "c")}
    net.assert_consistent()


@pytest.mark.parametrize("size", [4, 5, 6])
@pytest.mark.parametrize("seed", range(10))
def test_a_ring_up_at_once_ends_as_a_tree(size: int, seed: int) -> None:
    names = [f"n{i}" for i in range(size)]
    ring = [(names[i], names[(i + 1) % size]) for i in range(size)]
    net = Net(names, ring, random.Random(seed))
    net.bring_up(ring)
    assert net.cycles  # someone saw it
    assert {pair for _, pair in net.cycles} == {(f"n{size - 2}", f"n{size - 1}")}
    assert len(net.up()) == size - 1
    net.assert_consistent()


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_brought_up_in_batches_end_as_one_tree(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"b{i}" for i in range(rng.randint(3, 9))]
    links = {tuple(sorted((names[i], rng.choice(names[:i])))) for i in range(1, len(names))}
    for _ in range(rng.randrange(len(names))):
        x, y = rng.sample(names, 2)
        links.add((min(x, y), max(x, y)))
    order = sorted(links)
    rng.shuffle(order)
    net = Net(names, order, rng)
    while order:  # links coming up together, in batches
        size = rng.randint(1, len(order))
        net.bring_up(order[:size])
        order = order[size:]
    assert len(net.up()) == len(names) - 1
    net.assert_consistent()


def test_tie_break_ignores_rotation_and_direction() -> None:
    cycles = [("a", "b", "c", "d"), ("c", "d", "a", "b"), ("a", "d", "c", "b")]
    assert {tie_break(Cycle(brokers, "x", "y")) for brokers in cycles} == {("c", "d")}
    a = Topology("a", ["b", "d"])
    c = Topology("c", ["b", "d"])
    d = Topology("d", ["a", "c"])
    cycle = Cycle(("a", "b", "c", "d"), "c", "d")
    assert (a.drops(cycle), c.drops(cycle), d.drops(cycle)) == (None, "d", "c")


def test_an_update_closing_a_cycle_is_recorded_and_passed_on() -> None:
    a = Topology("a", ["b", "c"])
    a.connect("b", [["b"]])
    a.connect("c", [["c"]])
    cycle = a.update("b", [["b"], ["b", "c"]])  # b - c came up: a cycle
    assert cycle == Cycle(("a", "b", "c"), "c", "c")
    assert a.drops(cycle) is None  # b - c is the link to drop, b and c drop it
    assert a.reachable("b") == ["b", "c"]
    assert a.next_hop("c") == "c"  # the shorter way
    assert a.announcement("c") == [["a"], ["a", "b"]]  # never a path through c to c
    a.update("c", [["c"], ["c", "b"]])
    assert a.announcement("c") == [["a"], ["a", "b"]]
    assert a.announcement("b") == [["a"], ["a", "c"]]
    a.update("b", [["b"]])  # b dropped c
    a.update("c", [["c"]])
    assert a.reachable("b") == ["b"]
    assert a.check("b", [["b"], ["b", "c"]]) is not None


def test_announcements_carry_the_best_path_to_each_broker() -> None:
    a = Topology("a", ["b", "c", "d"])
    a.connect("b", [["b"], ["b", "x"], ["b", "x", "y"]])
    a.connect("c", [["c"]])
    a.update("c", [["c"], ["c", "y"]])  # y both ways: the shorter path is kept
    assert a.announcement("d") == [["a"], ["a", "b"], ["a", "c"], ["a", "b", "x"], ["a", "c", "y"]]
    assert a.next_hop("y") == "c"
    assert a.announcement("c") == [["a"], ["a", "b"], ["a", "b", "x"], ["a", "b", "x", "y"]]
    # A path naming this broker is reported and left out.
    assert a.update("c", [["c"], ["c", "a"]]) == Cycle(("a", "c"))
    assert a.reachable("c") == ["c"]


def test_disconnect_forgets_routes_but_remembers_names() -> None:
    a = Topology("a", ["b"])
    a.connect("b", [["b"], ["b", "c"], ["b", "c", "d"]])
    a.disconnect("b")
    assert not a.connected("b")
    assert a.next_hop("d") is None
    assert a.reachable("b") == []
    assert a.announcement("x") == [["a"]]
    assert all(a.known(x) for x in ("a", "b", "c", "d"))
    assert not a.known("e")
    assert a.remembered("b") == [["b"], ["b", "c"], ["b", "c", "d"]]
    # A down link no longer counts for cycles: c may come another way (b changed its links).
    assert a.check("b", [["b"]]) is None
    with pytest.raises(ValueError, match="not connected"):
        a.update("b", [["b"]])
    # After a restart the session record gives the names back.
    restarted = Topology("a", ["b"])
    assert not restarted.known("d")
    restarted.remember("b", a.remembered("b"))
    assert restarted.known("d") and restarted.next_hop("d") is None
    a.connect("b", [["b"]])
    assert a.remembered("b") == [["b"]]
    with pytest.raises(ValueError, match="connected"):
        a.remember("b", [["b"]])


@pytest.mark.parametrize(
    ("paths", "error"),
    [
        (None, "non-empty list of paths"),
        ([], "non-empty list of paths"),
        ("b", "non-empty list of paths"),
        ([["b"], []], r"paths\[1\] is not a non-empty list"),
        ([["b"], "b"], r"paths\[1\] is not a non-empty list"),
        ([["b"], ["b", 3]], r"paths\[1\] holds 3"),
        ([["b"], ["b", ""]], r"paths\[1\] holds ''"),
        ([["b"], ["c"]], r"paths\[1\] \['c'\] does not start there"),
        ([["b"], ["b", "c", "b"]], "names a broker twice"),
        ([["b"], ["b", "c"], ["b", "d", "c"]], r"paths\[1\] and \[2\] both lead to 'c'"),
        ([["b", "c"], ["b"]], r"paths\[0\] must be \['b'\]"),
    ],
)
def test_malformed_announcements_are_refused(paths: object, error: str) -> None:
    a = Topology("a", ["b"])
    with pytest.raises(ValueError, match=error):
        a.check("b", paths)
    with pytest.raises(ValueError, match=error):
        a.connect("b", paths)
    assert not a.connected("b")


def test_links_and_names_are_checked() -> None:
    with pytest.raises(ValueError, match="its own neighbour"):
        Topology("a", ["a"])
    with pytest.raises(ValueError, match="'z' is not a link of broker 'a'"):
        Topology("a", ["b"]).check("z", [["z"]])


class Net:
    """Brokers joined by links; reach updates carried in order per connection."""

    def __init__(
        self, names: list[str], links: list[tuple[str, str]], rng: random.Random | None = None
    ) -> None:
        self.links = links
        neighbours: dict[str, list[str]] = {name: [] for name in names}
        for x, y in links:
            neighbours[x].append(y)
            neighbours[y].append(x)
        self.brokers = {name: Topology(name, neighbours[name]) for name in names}
        self.rng = rng or random.Random(0)
        self.sent: dict[tuple[str, str], list[list[str]]] = {}
        self.wire: dict[tuple[str, str], deque[list[list[str]]]] = {}
        self.cycles: list[tuple[str, tuple[str, str]]] = []  # (who saw it, link to drop)

    def bring_up(self, links: list[tuple[str, str]]) -> None:
        """Connect `links` at the same moment (each side announces its current view), then
        carry reach updates until nothing changes."""
        hello = {
            (x, y): self.brokers[x].announcement(y) for a, b in links for x, y in ((a, b), (b, a))
        }
        for a, b in links:
            cycles = [
                self.brokers[a].connect(b, hello[b, a]),
                self.brokers[b].connect(a, hello[a, b]),
            ]
            if any(cycles):
                self.down(a, b)
                continue
            self.sent[a, b], self.sent[b, a] = hello[a, b], hello[b, a]
            self.wire[a, b], self.wire[b, a] = deque(), deque()
        for name in self.brokers:
            self.announce(name)
        while busy := sorted(key for key, queue in self.wire.items() if queue):
            sender, receiver = self.rng.choice(busy)
            paths = self.wire[sender, receiver].popleft()
            topology = self.brokers[receiver]
            cycle = topology.update(sender, paths)
            if cycle is not None:
                self.cycles.append((receiver, tie_break(cycle)))
                drop = topology.drops(cycle)
                if drop is not None:
                    self.down(receiver, drop)
            self.announce(receiver)

    def down(self, a: str, b: str) -> None:
        for x, y in ((a, b), (b, a)):
            self.brokers[x].disconnect(y)
            self.sent.pop((x, y), None)
            self.wire.pop((x, y), None)
            self.announce(x)

    def announce(self, name: str) -> None:
        topology = self.brokers[name]
        for to in sorted(topology.neighbours):
            if topology.connected(to) and (name, to) in self.wire:
                paths = topology.announcement(to)
                if self.sent[name, to] != paths:
                    self.sent[name, to] = paths
                    self.wire[name, to].append(paths)

    def up(self) -> set[tuple[str, str]]:
        return {(x, y) for x, y in self.links if self.brokers[x].connected(y)}

    def assert_consistent(self) -> None:
        """Every broker reaches every other one, by the next hop the tree of up links gives."""
        up = self.up()
        for x, y in self.links:
            assert self.brokers[x].connected(y) == self.brokers[y].connected(x)
        adjacent: dict[str, set[str]] = {name: set() for name in self.brokers}
        for x, y in up:
            adjacent[x].add(y)
            adjacent[y].add(x)
        for name, topology in self.brokers.items():
            hops: dict[str, str] = {}
            todo = deque((n, n) for n in adjacent[name])
            seen = {name}
            while todo:
                broker, hop = todo.popleft()
                if broker in seen:
                    continue
                seen.add(broker)
                hops[broker] = hop
                todo.extend((n, hop) for n in adjacent[broker])
            assert seen == set(self.brokers)
            assert {b: topology.next_hop(b) for b in hops} == hops
