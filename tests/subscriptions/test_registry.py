"""The subscription registry (`subscriptions.Registry`): indexes, routes and content filters,
without a broker. Filters are evaluated inside `targets`, so routing a publication to the
queues it reaches is a pure function of the registry and the message."""

from __future__ import annotations

import json

import pytest

from telemq.filters import compile_filter
from telemq.subscriptions import Identity, Persistence, Registry, Subscription, registry


def sub(
    registry_: Registry,
    queue: str,
    topic: str,
    *,
    qos: int = 2,
    text: str = "",
    persistence: Persistence = Persistence.PERS_AS_PUB,
    options: frozenset[str] = frozenset(),
    name: str = "",
) -> Subscription:
    subscription = Subscription(
        id=registry_.new_id(),
        identity=Identity("QM", queue),
        topic=topic,
        filter_text=text,
        qos=qos,
        persistence=persistence,
        options=options,
        name=name,
        compiled=compile_filter(text) if text else None,
    )
    registry_.add(subscription)
    return subscription


def targets(registry_: Registry, topic: str, payload: dict[str, object], qos: int = 2) -> dict:
    body = json.dumps(payload).encode()
    return dict(registry_.targets("", topic, body, qos, False, "pub", "user") or {})


@pytest.mark.parametrize("filtered", [1, 5], ids=["evaluated-one-by-one", "filter-set"])
def test_targets_merge_plain_and_filtered_subscriptions_per_queue(filtered: int) -> None:
    r = Registry()
    sub(r, "plain", "s/+", qos=1)
    sub(r, "both", "s/#", qos=0)
    sub(r, "both", "s/t", qos=2, text="temp > 30", persistence=Persistence.PERS)
    for n in range(filtered):
        sub(r, f"f{n}", "s/t", qos=1, text=f"temp > {20 + n}")
    sub(r, "pull", "s/t", options=frozenset({"PubOnReqOnly"}))
    hot = targets(r, "s/t", {"temp": 31})
    rank_pers = registry.PERSISTENCE_RANK[Persistence.PERS]
    assert hot["plain"] == (1, 1)
    assert hot["both"] == (2, rank_pers)  # the highest QoS and most durable of the two
    assert all(hot[f"f{n}"] == (1, 1) for n in range(filtered))
    assert "pull" not in hot  # PubOnReqOnly: only what ReqUpdate sends
    cold = targets(r, "s/t", {"temp": 20})
    assert cold == {"plain": (1, 1), "both": (0, 1)}
    assert targets(r, "s/t", {"temp": 31}, qos=1)["both"] == (1, rank_pers)  # capped
    assert targets(r, "other", {}) == {}


def test_admits_evaluates_the_content_filter_of_one_subscription() -> None:
    r = Registry()
    plain = sub(r, "q", "t")
    filtered = sub(r, "q", "t", text="Properties.Topic = 't' AND x = 1")
    assert plain.admits(b"{}", {"Topic": "t"})
    assert filtered.admits(b'{"x": 1}', {"Topic": "t"})
    assert not filtered.admits(b'{"x": 2}', {"Topic": "t"})


def test_indexes_follow_renames_and_removals() -> None:
    r = Registry()
    first = sub(r, "q1", "a", name="one")
    second = sub(r, "q1", "b")
    sub(r, "q2", "a")
    assert r.by_name("", "one") is first and r.get(first.key) is first
    first.name = "uno"
    r.changed(first, old_name="one")
    assert r.by_name("", "one") is None and r.by_name("", "uno") is first
    assert sorted(s.topic for s in r.of_queue("q1")) == ["a", "b"]
    assert {s.id for s in r.remove_queue("q1")} == {first.id, second.id}
    assert r.of_queue("q1") == [] and len(r) == 1
    assert targets(r, "a", {}) == {"q2": (2, 1)}
    with pytest.raises(ValueError, match="already registered"):
        r.add(Subscription(id=99, identity=Identity("QM", "q2"), topic="a"))


@pytest.mark.parametrize(
    "data",
    [
        {"queue": "q"},  # no id, no topic
        {"id": "x", "queue": "q", "topic": "t"},
        {"id": 1, "queue": "q", "topic": "t", "qos": 3},
        {"id": 1, "queue": "q", "topic": "t", "filter": "x >"},
        {"id": 1, "queue": "q", "topic": "t", "persistence": "Sometimes"},
    ],
)
def test_damaged_stored_subscriptions_are_refused_with_value_or_key_errors(data: dict) -> None:
    with pytest.raises((ValueError, KeyError)):
        Subscription.from_data(data)


def test_a_subscription_survives_its_stored_form() -> None:
    r = Registry()
    original = sub(r, "q", "a/+", qos=1, text="x = 1", name="n", options=frozenset({"DupsOK"}))
    again = Subscription.from_data(json.loads(json.dumps(original.to_data())))
    assert again.key == original.key and again.to_data() == original.to_data()
    assert again.compiled is not None


def test_a_stored_filter_is_keyed_by_its_canonical_text_today() -> None:
    """A record whose filter printed otherwise when it was stored (ESQL's
    ``Root.MQMD.UserIdentifier`` is now ``Properties.UserId``) is keyed as a new one is."""
    r = Registry()
    original = sub(r, "q", "a/+", text="Properties.UserId = 'alice'")
    data = json.loads(json.dumps(original.to_data()))
    data["filter"] = "Root.MQMD.UserIdentifier = 'alice'"
    again = Subscription.from_data(data)
    assert again.filter_text == "Properties.UserId = 'alice'" and again.key == original.key
    assert again.compiled is not None and again.compiled.properties == {"UserId"}
