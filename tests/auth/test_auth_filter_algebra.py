"""`filter_covers` and `filters_overlap` against a brute-force reference.

The reference enumerates every valid topic over a small alphabet of levels and asks
`topic_matches` directly, so the two functions are checked against the protocol's own
matching (including the `$` rule), not against a second implementation of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemq.broker.security.acl import (
    _covers_levels,
    _overlap_levels,
    filter_covers,
    filters_overlap,
)
from telemq.protocol.topics import topic_filter_error, topic_matches, topic_name_error

TOPIC_LEVELS = ("a", "b", "$x", "")
FILTER_LEVELS = (*TOPIC_LEVELS, "+", "#")


def _join_all(levels: Sequence[str], max_depth: int) -> Iterator[str]:
    for depth in range(1, max_depth + 1):
        for combo in itertools.product(levels, repeat=depth):
            yield "/".join(combo)


@cache
def universe(max_depth: int) -> tuple[str, ...]:
    return tuple(t for t in _join_all(TOPIC_LEVELS, max_depth) if topic_name_error(t) is None)


@cache
def all_filters(max_depth: int) -> tuple[str, ...]:
    return tuple(f for f in _join_all(FILTER_LEVELS, max_depth) if topic_filter_error(f) is None)


@cache
def matched(topic_filter: str, max_depth: int) -> frozenset[str]:
    return frozenset(t for t in universe(max_depth) if topic_matches(topic_filter, t))


def ref_covers(pattern: str, requested: str, max_depth: int = 3) -> bool:
    return matched(requested, max_depth) <= matched(pattern, max_depth)


def ref_overlap(first: str, second: str, max_depth: int = 3) -> bool:
    return bool(matched(first, max_depth) & matched(second, max_depth))


def filters(max_depth: int) -> st.SearchStrategy[str]:
    return (
        st.lists(st.sampled_from(FILTER_LEVELS), min_size=1, max_size=max_depth)
        .map("/".join)
        .filter(lambda f: topic_filter_error(f) is None)
    )


# ---------------------------------------------------------------------------
# Properties (depth <= 3, as the brute-force universe)


@settings(max_examples=500, deadline=None)
@given(filters(3), filters(3))
def test_covers_matches_reference(pattern: str, requested: str) -> None:
    assert filter_covers(pattern, requested) == ref_covers(pattern, requested)


@settings(max_examples=500, deadline=None)
@given(filters(3), filters(3))
def test_overlap_matches_reference(first: str, second: str) -> None:
    assert filters_overlap(first, second) == ref_overlap(first, second)
    assert filters_overlap(first, second) == filters_overlap(second, first)


@settings(max_examples=500, deadline=None)
@given(filters(4), filters(4))
def test_deeper_filters_match_reference(first: str, second: str) -> None:
    # Topics one level deeper than the filters see every difference a `#` can make.
    assert filter_covers(first, second) == ref_covers(first, second, 5)
    assert filters_overlap(first, second) == ref_overlap(first, second, 5)


def test_exhaustive_depth_3() -> None:
    """Every pair of valid filters of depth <= 3 over the alphabet (about 66,000 pairs)."""
    every = all_filters(3)
    for pattern in every:
        for requested in every:
            assert filter_covers(pattern, requested) == ref_covers(pattern, requested), (
                pattern,
                requested,
            )
            assert filters_overlap(pattern, requested) == ref_overlap(pattern, requested), (
                pattern,
                requested,
            )


@settings(max_examples=300, deadline=None)
@given(filters(3))
def test_covers_is_reflexive_and_implies_overlap(topic_filter: str) -> None:
    assert filter_covers(topic_filter, topic_filter)
    assert filters_overlap(topic_filter, topic_filter)


@settings(max_examples=300, deadline=None)
@given(filters(3), filters(3))
def test_covers_implies_overlap(pattern: str, requested: str) -> None:
    # Every valid filter matches at least one topic, so coverage implies a common topic.
    if filter_covers(pattern, requested):
        assert filters_overlap(pattern, requested)


# ---------------------------------------------------------------------------
# The cases the security issue names


@pytest.mark.parametrize(
    ("pattern", "requested", "expected"),
    [
        ("sensors/#", "sensors/+/temp", True),
        ("sensors/#", "sensors", True),
        ("sensors/#", "sensors/#", True),
        ("sensors/+", "sensors/#", False),
        ("sensors/+", "sensors/+", True),
        ("sensors/+", "sensors/x", True),
        ("sensors/x", "sensors/+", False),
        ("sensors/+/temp", "sensors/+/+", False),
        ("#", "#", True),
        ("#", "a/b/c/d/e", True),
        ("+/#", "#", True),
        ("#", "+/#", True),
        ("+", "#", False),
        ("+/+/#", "#", False),
        ("#", "$SYS/#", False),
        ("#", "$SYS/broker/uptime", False),
        ("+/x", "$SYS/x", False),
        ("+/#", "$SYS", False),
        ("$SYS/#", "$SYS/broker/+", True),
        ("$SYS/#", "#", False),
        ("a/+/#", "a", False),
        ("a/#", "a/+/+/#", True),
        ("a//b", "a/+/b", False),
        ("a/+/b", "a//b", True),
        ("x/$y", "x/+", False),
        ("x/+", "x/$y", True),
    ],
)
def test_covers_examples(pattern: str, requested: str, expected: bool) -> None:
    assert filter_covers(pattern, requested) is expected


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("sensors/secret/#", "sensors/#", True),
        ("sensors/secret/#", "sensors/+/temp", True),
        ("sensors/secret/#", "sensors/public/+", False),
        ("sensors/secret", "sensors/+/#", True),
        ("a/#", "a", True),
        ("a/+", "a", False),
        ("#", "$SYS/#", False),
        ("+/#", "$SYS/x", False),
        ("$SYS/#", "$SYS/+/uptime", True),
        ("#", "+", True),
        ("+/+", "+", False),
        ("a/+/c", "+/b/+", True),
        ("a/+/c", "+/b/d", False),
    ],
)
def test_overlap_examples(first: str, second: str, expected: bool) -> None:
    assert filters_overlap(first, second) is expected
    assert filters_overlap(second, first) is expected


# ---------------------------------------------------------------------------
# Adversarial sizes: count level reads, never wall-clock time


class CountingLevels(Sequence[str]):
    """A level list that counts every read, to bound the work of the algorithms."""

    def __init__(self, levels: list[str], counter: list[int]) -> None:
        self._levels = levels
        self._counter = counter

    def __len__(self) -> int:
        self._counter[0] += 1
        return len(self._levels)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        self._counter[0] += 1
        return self._levels[index]


ADVERSARIAL = [
    ("+/" * 5000 + "#", "+/" * 4999 + "x"),
    ("+/" * 5000 + "x", "+/" * 5000 + "y"),
    ("+/" * 10000 + "+", "a/" * 10000 + "#"),
    ("a/" * 10000 + "#", "+/" * 10000 + "#"),
    ("/".join(["+"] * 20000), "/".join(["+"] * 20000)),
    ("/".join(["+"] * 20000), "/".join(["+"] * 19999) + "/#"),
    ("#", "/".join(["+"] * 20000)),
    ("/".join(["a"] * 20000), "/".join(["a"] * 20000)),
]


@pytest.mark.parametrize(("first", "second"), ADVERSARIAL)
def test_work_is_linear(first: str, second: str) -> None:
    size = first.count("/") + second.count("/") + 2
    for function in (_covers_levels, _overlap_levels):
        for a, b in ((first, second), (second, first)):
            counter = [0]
            function(CountingLevels(a.split("/"), counter), CountingLevels(b.split("/"), counter))
            assert counter[0] <= 4 * size + 16, (function.__name__, counter[0], size)


@pytest.mark.parametrize(("first", "second"), ADVERSARIAL)
def test_public_functions_agree_on_large_inputs(first: str, second: str) -> None:
    # The level-list functions are what the public ones run; a plain call must also finish.
    assert filter_covers(first, second) == _covers_levels(first.split("/"), second.split("/"))
    assert filters_overlap(first, second) == _overlap_levels(first.split("/"), second.split("/"))
