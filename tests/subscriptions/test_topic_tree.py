"""The subscription trie (`subscriptions.topic_tree`): what it matches, and what it costs.

* matching agrees with the plain matcher (`protocol.topic_matches`), `$` topics included,
  and follows adds, QoS changes and removals;
* no super-linear work on adversarial filters: a publication visits at most the nodes of the
  trie, counted with an instrumented node class (never timed).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from telemq.protocol.topics import topic_matches
from telemq.subscriptions import topic_tree
from telemq.subscriptions.topic_tree import SubscriptionTree


def test_matches_agree_with_the_plain_matcher_and_follow_changes() -> None:
    rng = random.Random(19)
    levels = ["a", "b", "$SYS", ""]
    filters = sorted(
        {
            "/".join(rng.choice([*levels, "+", "#"]) for _ in range(rng.randint(1, 4)))
            for _ in range(300)
        }
    )
    filters = [f for f in filters if "#" not in f[:-1]]  # '#' only last
    tree = SubscriptionTree()
    for index, topic_filter in enumerate(filters):
        tree.add(topic_filter, index, index % 3)
    topics = {"/".join(rng.choice(levels) for _ in range(rng.randint(1, 4))) for _ in range(200)}
    for topic in topics:
        expected = {i: i % 3 for i, f in enumerate(filters) if topic_matches(f, topic)}
        assert dict(tree.match(topic)) == expected, topic
    removed = set(range(0, len(filters), 2))
    for index in removed:
        tree.remove(filters[index], index)
    tree.add(filters[1], 1, 2)  # a new QoS for a subscription that is there
    for topic in topics:
        expected = {
            i: (2 if i == 1 else i % 3)
            for i, f in enumerate(filters)
            if i not in removed and topic_matches(f, topic)
        }
        assert dict(tree.match(topic)) == expected, topic
    assert tree.count == len(filters) - len(removed)


class CountingNode(topic_tree._Node):
    """A trie node that counts how often `match` looks at its children."""

    visits: ClassVar[list[int]] = [0]
    __slots__ = ("_children",)

    def __init__(self) -> None:
        self._children: dict[str, topic_tree._Node] = {}
        self.subscribers = {}

    @property
    def children(self) -> dict[str, topic_tree._Node]:
        CountingNode.visits[0] += 1
        return self._children

    @children.setter
    def children(self, value: dict[str, topic_tree._Node]) -> None:
        self._children = value


def _node_count(tree: SubscriptionTree) -> int:
    stack = [tree._root]
    count = 0
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node._children.values())  # type: ignore[attr-defined]
    return count


def _trie_visits(
    monkeypatch: pytest.MonkeyPatch, filters: list[str], topic: str
) -> tuple[int, int, dict[Any, int]]:
    monkeypatch.setattr(topic_tree, "_Node", CountingNode)
    tree = SubscriptionTree()
    for index, topic_filter in enumerate(filters):
        tree.add(topic_filter, index, 1)
    CountingNode.visits[0] = 0
    result = dict(tree.match(topic))
    return CountingNode.visits[0], _node_count(tree), result


def _deep_filters(n: int) -> list[str]:
    return [
        "+/" * n + "#",
        "/".join(["+"] * n),
        "a/" * n + "#",
        "/".join(["a"] * n),
        "#",
        "+/" * (n - 1) + "b",
    ]


@pytest.mark.pure_python  # counts visits with an instrumented node class
@pytest.mark.parametrize("topic_levels", [lambda n: n, lambda n: 2 * n, lambda n: n // 2])
def test_trie_work_grows_linearly_with_depth(
    monkeypatch: pytest.MonkeyPatch, topic_levels: Callable[[int], int]
) -> None:
    counts = []
    for n in (200, 400, 800):
        topic = "/".join(["a"] * topic_levels(n))
        visits, nodes, result = _trie_visits(monkeypatch, _deep_filters(n), topic)
        assert visits <= nodes, (visits, nodes)
        counts.append(visits)
        # The answer is still right: compare with the plain matcher.
        expected = {i for i, f in enumerate(_deep_filters(n)) if topic_matches(f, topic)}
        assert set(result) == expected
    for smaller, larger in itertools.pairwise(counts):
        assert larger <= 2.2 * smaller + 10, counts


@pytest.mark.pure_python  # counts visits with an instrumented node class
def test_trie_work_is_bounded_by_its_size_even_for_every_combination(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worst a subscriber can do is make a publication visit its own subscriptions:
    the filters {a,+}^d x {b} all share the topic's path and none matches it."""
    depth = 10
    filters = ["/".join(combo) + "/b" for combo in itertools.product(("a", "+"), repeat=depth)]
    visits, nodes, result = _trie_visits(monkeypatch, filters, "/".join(["a"] * (depth + 1)))
    assert result == {}
    assert visits <= nodes


def test_the_dollar_rule_holds_in_the_trie() -> None:
    tree = SubscriptionTree()
    for index, topic_filter in enumerate(["#", "+/broker/#", "+/+/+", "$SYS/#", "$SYS/+/uptime"]):
        tree.add(topic_filter, index, 1)
    assert set(dict(tree.match("$SYS/broker/uptime"))) == {3, 4}


def test_filters_counts_the_distinct_filters_subscribed_to() -> None:
    """`filters` (the `topics` of /metrics) follows random subscribes and unsubscribes."""
    rng = random.Random(7)
    filters = ["a", "a/b", "a/+", "#", "+/b", "a/b/#", "x/y/z"]
    tree = SubscriptionTree()
    model: dict[str, set[int]] = {}
    for _ in range(2000):
        topic_filter, key = rng.choice(filters), rng.randrange(4)
        if rng.random() < 0.5:
            tree.add(topic_filter, key, rng.randrange(3))
            model.setdefault(topic_filter, set()).add(key)
        else:
            tree.remove(topic_filter, key)
            model.get(topic_filter, set()).discard(key)
        assert tree.filters == sum(1 for keys in model.values() if keys)
        assert tree.count == sum(len(keys) for keys in model.values())
