"""The content-filter budgets of the registry: size per owner, time per owner and publication.

`Registry.targets` evaluates each owner's filters until that owner's time budget for the
publication is spent (the first whatever it costs); that owner's filtered subscriptions it
did not reach are skipped (not delivered), counted and logged naming the owner, so one
publication cannot hold the broker however many filters match it, and no subscription is
skipped because of another user's filters.
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
    registry = Registry(filter_time=1e-9)  # spent by the first filter
    for n in range(count):
        filtered(registry, f"q{n}", f"n = 1 OR m = {n}")
    with caplog.at_level(logging.WARNING, logger="telemq.subscriptions"):
        found = targets(registry)
    assert len(found) == 1, "the owner's first filter is evaluated whatever it costs"
    assert registry.filters_skipped == count - 1
    assert f"{count - 1} filtered subscriptions of user 'u' not evaluated" in caplog.text
    assert "limits.max_filter_time" in caplog.text


@pytest.mark.parametrize("slow", [2, 6])  # a plain list (3 in all), and a FilterSet
@pytest.mark.parametrize("bob_first", [False, True])
def test_one_owner_past_its_budget_never_skips_another_owners_filters(
    slow: int, bob_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(filter_time=1e-9)  # each owner's budget spent by its first filter
    if bob_first:
        filtered(registry, "bob", "n = 1", owner="bob")
    for n in range(slow):
        filtered(registry, f"a{n}", f"n = 1 OR m = {n}", owner="alice")
    if not bob_first:
        filtered(registry, "bob", "n = 1", owner="bob")
    with caplog.at_level(logging.WARNING, logger="telemq.subscriptions"):
        found = targets(registry)
    assert "bob" in found
    assert len(found) == 2, "alice's first filter only"
    assert registry.filters_skipped == slow - 1
    assert f"{slow - 1} filtered subscriptions of user 'alice' not evaluated" in caplog.text
    assert "user 'bob'" not in caplog.text
    assert targets(registry, b'{"n": 2}') == {}, "bob's filter is evaluated, not waved through"


def test_a_filter_shared_by_owners_is_skipped_only_for_the_owner_past_its_budget() -> None:
    registry = Registry(filter_time=1e-9)
    for n in range(5):  # unindexed: evaluated before the indexed `n = 1`, spending the budget
        filtered(registry, f"a{n}", f"n = 1 OR m = {n}", owner="alice")
    filtered(registry, "alice-too", "n = 1", owner="alice")
    filtered(registry, "bob", "n = 1", owner="bob")
    found = targets(registry)
    assert "bob" in found and "alice-too" not in found
    assert len(found) == 2
    assert registry.filters_skipped == 5  # alice's 4 other unindexed ones and her `n = 1`


def test_anonymous_clients_share_one_budget(caplog: pytest.LogCaptureFixture) -> None:
    """Anonymous clients are one owner, "" (as for the size budget): many client ids do not
    make many budgets."""
    registry = Registry(filter_time=1e-9)
    filtered(registry, "anon-1", "n = 1 OR m = 1", owner="")
    filtered(registry, "anon-2", "n = 1 OR m = 2", owner="")
    filtered(registry, "bob", "n = 1", owner="bob")
    with caplog.at_level(logging.WARNING, logger="telemq.subscriptions"):
        found = targets(registry)
    assert "bob" in found and len(found) == 2
    assert registry.filters_skipped == 1
    assert "1 filtered subscriptions of anonymous clients not evaluated" in caplog.text


def test_owners_are_kept_per_route_only_when_there_are_several() -> None:
    registry = Registry(filter_time=0.005)
    filtered(registry, "a1", "n = 1", owner="alice")
    filtered(registry, "a2", "n = 2", owner="alice")
    route = registry.route("", "t")
    assert route is not None and route.owners is None
    filtered(registry, "b1", "n = 1", owner="bob")
    filtered(registry, "a3", "n = 3", owner="alice")
    route = registry.route("", "t")
    assert route is not None and route.owners is not None
    owners = [route.owners[position] for position in range(len(route.filtered))]
    assert owners == ["alice", "alice", "alice", "bob"]  # each owner's run together
    assert owners == [s.owner for s in route.filtered]


@pytest.mark.parametrize("budget", [0.0, 60.0])  # none, and one no filter here comes near
@pytest.mark.parametrize("owners", [1, 2])
@pytest.mark.parametrize("count", [2, 6])
def test_without_a_budget_every_filter_is_evaluated(count: int, owners: int, budget: float) -> None:
    registry = Registry(filter_time=budget)
    for n in range(count):
        filtered(registry, f"q{n}", f"n = 1 OR m = {n}", owner=f"user{n % owners}")
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
