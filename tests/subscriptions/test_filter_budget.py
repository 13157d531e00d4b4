"""The content-filter budgets of the registry: size per owner, time per publication.

`Registry.targets` evaluates filters until the publication's time budget is spent; the
filtered subscriptions it did not reach are skipped (not delivered), counted and logged, so
one publication cannot hold the broker however many filters match it.
"""

from __future__ import annotations

import logging

import pytest

from telemq.filters import compile_filter
from telemq.subscriptions import Identity, Registry, Subscription


def filtered(registry: Registry, queue: str, text: str, owner: str = "u") -> Subscription:
    subscription = Subscription(
        id=registry.new_id(),
        identity=Identity("QM", queue),
        topic="t",
        filter_text=text,
        compiled=compile_filter(text),
        owner=owner,
    )
    registry.add(subscription)
    return subscription


def targets(registry: Registry, payload: bytes = b'{"n": 1}') -> dict[str, tuple[int, int]]:
    found = registry.targets("", "t", payload, 1, False, "c", "u")
    assert found is not None
    return found


@pytest.mark.parametrize("count", [2, 6])  # a plain list, and a FilterSet (4 or more)
def test_past_the_time_budget_filters_are_skipped_counted_and_logged(
    count: int, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(filter_time=1e-9)  # spent before the first filter
    for n in range(count):
        filtered(registry, f"q{n}", f"n = 1 OR m = {n}")
    with caplog.at_level(logging.WARNING, logger="telemq.subscriptions"):
        assert targets(registry) == {}
    assert registry.filters_skipped == count
    assert f"{count} filtered subscriptions not evaluated" in caplog.text
    assert "limits.max_filter_time" in caplog.text


@pytest.mark.parametrize("count", [2, 6])
def test_without_a_budget_every_filter_is_evaluated(count: int) -> None:
    registry = Registry(filter_time=0.0)
    for n in range(count):
        filtered(registry, f"q{n}", f"n = 1 OR m = {n}")
    filtered(registry, "other", "n = 2")
    assert sorted(targets(registry)) == [f"q{n}" for n in range(count)]
    assert registry.filters_skipped == 0


def test_filter_size_is_counted_per_owner() -> None:
    registry = Registry()
    first = filtered(registry, "q1", "a = 1", owner="alice")  # size 3
    filtered(registry, "q2", "a = 1 AND b = 2", owner="alice")  # size 7
    filtered(registry, "q3", "a = 1", owner="bob")
    assert registry.filter_size_of("alice") == 10
    assert registry.filter_size_of("bob") == 3
    registry.remove(first)
    assert registry.filter_size_of("alice") == 7
    assert registry.filter_size_of("carol") == 0
