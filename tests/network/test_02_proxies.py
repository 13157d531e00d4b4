"""`network.proxies`: proxy subscriptions counted per neighbour and pair.

A local global subscription asks every neighbour; a proxy asked by neighbour N asks every
neighbour but N. Only 0->1 and 1->0 edges become changes. The randomised test compares the
table, and the changes it returns, with a model recomputed from scratch after every step.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from telemq.network.proxies import Change, Pair, ProxyTable, proxy_pair


def test_one_proxy_whatever_the_number_of_subscribers() -> None:
    table = ProxyTable(["hub"])
    assert table.set(1, ("", "a/#")) == [Change("hub", "add", "", "a/#")]
    assert table.set(2, ("", "a/#")) == []
    assert table.set(3, ("", "a/#")) == []
    assert table.count("hub", ("", "a/#")) == 3
    assert table.set(1, None) == []
    assert table.set(2, None) == []
    assert table.set(3, None) == [Change("hub", "remove", "", "a/#")]
    assert table.set(3, None) == []  # gone already
    assert table.wanted("hub") == []


def test_overlapping_filters_are_not_merged() -> None:
    table = ProxyTable(["hub"])
    table.set(1, ("", "a/#"))
    assert table.set(2, ("", "a/b")) == [Change("hub", "add", "", "a/b")]
    assert table.set(3, ("sp", "a/b")) == [Change("hub", "add", "sp", "a/b")]
    assert table.wanted("hub") == [("", "a/#"), ("", "a/b"), ("sp", "a/b")]


def test_a_subscription_changed_in_place_is_counted_again() -> None:
    table = ProxyTable(["hub", "edge"])
    table.set("s", ("", "a"))
    table.set("t", ("", "b"))
    assert table.set("s", ("", "b")) == [
        Change("edge", "remove", "", "a"),
        Change("hub", "remove", "", "a"),
    ]
    assert table.count("hub", ("", "b")) == 2
    assert table.set("s", ("x", "b")) == [
        Change("edge", "add", "x", "b"),
        Change("hub", "add", "x", "b"),
    ]
    assert table.set("s", ("x", "b")) == []  # the same again: nothing
    assert table.set("s", None) == [
        Change("edge", "remove", "x", "b"),
        Change("hub", "remove", "x", "b"),
    ]
    assert table.wanted("hub") == table.wanted("edge") == [("", "b")]


def test_proxies_from_a_neighbour_go_to_the_others_but_not_back() -> None:
    table = ProxyTable(["n1", "n2", "n3"])
    assert table.set("proxy", ("", "t/+"), source="n1") == [
        Change("n2", "add", "", "t/+"),
        Change("n3", "add", "", "t/+"),
    ]
    assert table.wanted("n1") == []
    # A local subscription of the same pair asks n1 too, and nothing new of the others.
    assert table.set("local", ("", "t/+")) == [Change("n1", "add", "", "t/+")]
    assert table.count("n2", ("", "t/+")) == 2
    # The local one going leaves n1 alone again.
    assert table.set("local", None) == [Change("n1", "remove", "", "t/+")]
    # n2 asking the same pair: now every neighbour has a contributor from elsewhere.
    assert table.set("from n2", ("", "t/+"), source="n2") == [Change("n1", "add", "", "t/+")]
    assert [table.count(n, ("", "t/+")) for n in ("n1", "n2", "n3")] == [1, 1, 2]


def test_a_local_subscription_turned_proxy_changes_only_what_differs() -> None:
    table = ProxyTable(["n1", "n2"])
    table.set("s", ("", "a"))
    # Same pair, now from n1: n2 keeps it, n1 loses it (no remove-then-add for n2).
    assert table.set("s", ("", "a"), source="n1") == [Change("n1", "remove", "", "a")]


def test_neighbours_come_and_go() -> None:
    table = ProxyTable(["n1"])
    table.set("local", ("", "a"))
    table.set("p", ("", "b"), source="n1")
    table.set("q", ("", "c"), source="n2")  # n2: not (yet) a neighbour, still counts
    assert table.wanted("n1") == [("", "a"), ("", "c")]
    assert table.add_neighbour("n2") == [Change("n2", "add", "", "a"), Change("n2", "add", "", "b")]
    assert table.neighbours == ["n1", "n2"]
    assert table.remove_neighbour("n1") == [
        Change("n1", "remove", "", "a"),
        Change("n1", "remove", "", "c"),
    ]
    assert table.wanted("n2") == [("", "a"), ("", "b")]  # p, from n1, still counts
    assert table.set("p", None) == [Change("n2", "remove", "", "b")]
    with pytest.raises(ValueError, match="already"):
        table.add_neighbour("n2")
    with pytest.raises(ValueError, match="not in the proxy table"):
        table.remove_neighbour("n1")
    with pytest.raises(ValueError, match="needs a name"):
        table.add_neighbour("")
    with pytest.raises(KeyError):
        table.wanted("n1")


@pytest.mark.parametrize(
    ("sub_point", "topic_filter", "pair"),
    [
        ("", "a/b", ("", "a/b")),
        ("sp", "#", ("sp", "#")),
        ("", "$share/g1/a/+", ("", "a/+")),
        ("sp", "$share/g2/$SYS/#", None),
        ("", "$SYS/#", None),
        ("", "$SYS/broker/uptime", None),
        ("", "$SYS", None),
        ("", "$link/control", None),
        ("", "$SYSTEM/x", ("", "$SYSTEM/x")),
        ("", "$other/x", ("", "$other/x")),
    ],
)
def test_proxy_pair(sub_point: str, topic_filter: str, pair: Pair | None) -> None:
    assert proxy_pair(sub_point, topic_filter) == pair


def test_shared_groups_of_one_filter_make_one_proxy() -> None:
    table = ProxyTable(["hub"])
    assert table.set(1, proxy_pair("", "$share/g1/a")) == [Change("hub", "add", "", "a")]
    assert table.set(2, proxy_pair("", "$share/g2/a")) == []
    assert table.set(3, proxy_pair("", "a")) == []
    assert table.count("hub", ("", "a")) == 3
    assert table.set(4, proxy_pair("", "$SYS/#")) == []


def test_a_malformed_shared_filter_is_an_error() -> None:
    with pytest.raises(ValueError, match="share name"):
        proxy_pair("", "$share//a")


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_match_a_model(seed: int) -> None:
    rng = random.Random(seed)
    names = ["n1", "n2", "n3", "n4"]
    pairs = [(sp, f) for sp in ("", "sp") for f in ("a", "a/#", "b", "+/c")]
    neighbours = set(rng.sample(names, 2))
    table = ProxyTable(neighbours)
    subs: dict[int, tuple[Pair, str]] = {}
    for _ in range(2000):
        before = model(subs, neighbours)
        roll = rng.random()
        if roll < 0.05:
            name = rng.choice(names)
            if name in neighbours:
                neighbours.discard(name)
                changes = table.remove_neighbour(name)
            else:
                neighbours.add(name)
                changes = table.add_neighbour(name)
        else:
            sub_id = rng.randrange(30)
            if roll < 0.25:
                subs.pop(sub_id, None)
                changes = table.set(sub_id, None)
            else:
                pair = rng.choice(pairs)
                source = rng.choice(["", "", *names])
                subs[sub_id] = (pair, source)
                changes = table.set(sub_id, pair, source)
        after = model(subs, neighbours)
        assert changes == expected_changes(before, after)
        assert table.neighbours == sorted(neighbours)
        for name in neighbours:
            assert table.wanted(name) == sorted(after[name])
            for pair in pairs:
                assert table.count(name, pair) == after[name][pair]


def model(subs: dict[int, tuple[Pair, str]], neighbours: set[str]) -> dict[str, Counter[Pair]]:
    """The counts, from scratch: each subscription counts for every neighbour but its source."""
    counts: dict[str, Counter[Pair]] = {name: Counter() for name in neighbours}
    for pair, source in subs.values():
        for name in neighbours - {source}:
            counts[name][pair] += 1
    return counts


def expected_changes(
    before: dict[str, Counter[Pair]], after: dict[str, Counter[Pair]]
) -> list[Change]:
    changes = []
    for name in before.keys() | after.keys():
        old = set(before.get(name, Counter()))
        new = set(after.get(name, Counter()))
        changes += [Change(name, "add", *pair) for pair in new - old]
        changes += [Change(name, "remove", *pair) for pair in old - new]
    return sorted(changes)
