"""Content filters on RegSub routing JSON publications (design §7 through the command model):
payload fields and properties, NULL/UNKNOWN rejecting, non-JSON payloads, retained copies and
ReqUpdate filtered, the filter as part of the subscription key, limits (3150)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from .conftest import ClientFactory, start_broker
from .helpers import BrokerProcess, MQClient, assert_error, assert_ok, unique

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory, 'name = "QM.FILTERS"\n[sys]\ninterval = 0\n')
    yield process
    process.finalize()


def _publish_all(publisher: MQClient, topic: str, payloads: list[bytes]) -> None:
    for payload in payloads:
        publisher.publish(topic, payload, qos=1)


PAYLOADS = [
    json.dumps({"id": 1, "temp": 35, "site": {"name": "north"}}).encode(),
    json.dumps({"id": 2, "temp": 20, "site": {"name": "north"}}).encode(),
    json.dumps({"id": 3, "temp": 31.5, "site": {"name": "south"}}).encode(),
    json.dumps({"id": 4, "temp": "35", "site": {"name": "north"}}).encode(),
    json.dumps({"id": 5, "site": {"name": "north"}}).encode(),
    json.dumps({"id": 6, "temp": 99, "site": {"name": "north"}, "readings": [7, 8]}).encode(),
    b"not json at all",
    b"",
]


@pytest.mark.parametrize(
    ("text", "expected_ids"),
    [
        ("temp > 30", [1, 3, 6]),
        ("temp > 30 AND site.name = 'north'", [1, 6]),
        ("temp BETWEEN 20 AND 32", [2, 3]),
        ("site.name IN ('south')", [3]),
        ("site.name LIKE 'no%'", [1, 2, 4, 5, 6]),
        ("temp IS NULL", [5, "not json at all", ""]),
        ("NOT (temp > 30)", [2]),
        ("Body.readings[1] = 8", [6]),
        ("temp = '35'", [4]),
    ],
)
def test_filter_routes_json_publications(
    broker: BrokerProcess, clients: ClientFactory, form: str, text: str, expected_ids: list[int]
) -> None:
    subscriber = clients(broker.port)
    topic = unique("flt/route/")
    reply = subscriber.command(
        {"Command": "RegSub", "Topic": f"{topic}/#", "Filter": text}, form=form
    )
    assert_ok(reply)
    publisher = clients(broker.port)
    _publish_all(publisher, f"{topic}/sensor", PAYLOADS)
    subscriber.sync(publisher)
    got = [_id_of(m.payload) for m in subscriber.deliveries(topic)]
    assert got == expected_ids, f"filter {text!r}"


def _id_of(payload: bytes) -> int | str:
    """The "id" of a JSON payload; a payload that is not JSON stands for itself."""
    try:
        return int(json.loads(payload)["id"])
    except ValueError:
        return payload.decode()


def test_filter_on_message_properties(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    subscriber = clients(broker.port)
    topic = unique("flt/props/")
    publisher = clients(broker.port)
    text = f"Properties.Topic LIKE '%/alarm' AND Properties.ClientId = '{publisher.client_id}'"
    assert_ok(
        subscriber.command({"Command": "RegSub", "Topic": f"{topic}/#", "Filter": text}, form=form)
    )
    other = clients(broker.port)
    publisher.publish(f"{topic}/alarm", b"1", qos=1)
    publisher.publish(f"{topic}/status", b"2", qos=1)
    other.publish(f"{topic}/alarm", b"3", qos=1)
    subscriber.sync(publisher)
    subscriber.sync(other)
    assert [m.payload for m in subscriber.deliveries(topic)] == [b"1"]


def test_filter_applies_to_publish_commands(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    subscriber = clients(broker.port)
    topic = unique("flt/cmd/")
    assert_ok(
        subscriber.command({"Command": "RegSub", "Topic": topic, "Filter": "level >= 3"}, form=form)
    )
    publisher = clients(broker.port)
    for level in (1, 3, 5):
        body = json.dumps({"level": level}).encode()
        assert_ok(publisher.command({"Command": "Publish", "Topic": topic}, form=form, body=body))
    subscriber.sync(publisher)
    assert [json.loads(m.payload)["level"] for m in subscriber.deliveries(topic)] == [3, 5]


def test_filter_selects_retained_copies_and_req_update(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    topic = unique("flt/ret/")
    publisher.publish(f"{topic}/hot", json.dumps({"temp": 40}).encode(), qos=1, retain=True)
    publisher.publish(f"{topic}/cold", json.dumps({"temp": 5}).encode(), qos=1, retain=True)
    subscriber = clients(broker.port)
    assert_ok(
        subscriber.command(
            {"Command": "RegSub", "Topic": f"{topic}/#", "Filter": "temp > 30"}, form=form
        )
    )
    subscriber.sync(publisher)
    assert [m.topic for m in subscriber.deliveries(topic)] == [f"{topic}/hot"]
    reply = subscriber.command(
        {"Command": "ReqUpdate", "Topic": f"{topic}/#", "Filter": "temp > 30"}, form=form
    )
    assert_ok(reply)
    subscriber.sync(publisher)
    assert [m.topic for m in subscriber.deliveries(topic)] == [f"{topic}/hot", f"{topic}/hot"]
    # ReqUpdate must name the same filter: without it, it is another subscription.
    reply = subscriber.command({"Command": "ReqUpdate", "Topic": f"{topic}/#"}, form=form)
    assert_error(reply, 3073)


def test_same_topic_two_filters_two_subscriptions_one_copy(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    subscriber = clients(broker.port)
    topic = unique("flt/two/")
    for text in ("temp > 10", "temp > 20"):
        assert_ok(
            subscriber.command({"Command": "RegSub", "Topic": topic, "Filter": text}, form=form)
        )
    listed = subscriber.list_subs(QName=subscriber.client_id, Topic=topic)
    assert len(listed) == 2
    publisher = clients(broker.port)
    for temp in (5, 15, 25):
        publisher.publish(topic, json.dumps({"temp": temp}).encode(), qos=1)
    subscriber.sync(publisher)
    assert [json.loads(m.payload)["temp"] for m in subscriber.deliveries(topic)] == [15, 25]


def test_filter_limits_are_3150(broker: BrokerProcess, clients: ClientFactory, form: str) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("flt/limits/")
    deep = "(" * 65 + "x = 1" + ")" * 65
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "Filter": deep}, form=form
    )
    assert_error(reply, 3150)
    long_text = "x = '" + "a" * 65_536 + "'"
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "Filter": long_text}, form=form
    )
    assert_error(reply, 3150)
    assert client.list_subs(QName=queue) == []
    nested = "(" * 20 + "x = 1" + ")" * 20
    assert_ok(
        client.command(
            {"Command": "RegSub", "Topic": topic, "QName": queue, "Filter": nested}, form=form
        )
    )


ROUTE_CASES = [
    ("temp > 30", [1, 3, 6]),
    ("temp > 30 AND site.name = 'north'", [1, 6]),
    ("temp BETWEEN 20 AND 32", [2, 3]),
    ("temp BETWEEN 20 AND 32 AND site.name = 'south'", [3]),
    ("site.name IN ('south')", [3]),
    ("site.name LIKE 'no%'", [1, 2, 4, 5, 6]),
    ("temp IS NULL", [5, "not json at all", ""]),
    ("NOT (temp > 30)", [2]),
    ("temp = '35'", [4]),
    ("temp = 35 AND id = 1", [1]),
    ("id IN (2, 4, 9) AND temp < 30", [2]),
    ("temp < 21 OR temp > 98", [2, 6]),
]


def test_many_filters_on_one_topic_route_like_each_alone(
    broker: BrokerProcess, clients: ClientFactory
) -> None:
    """Enough filtered subscriptions on one topic for the broker to match them through its
    filter index: each subscriber still gets exactly what its filter alone selects."""
    topic = unique("flt/many/")
    subscribers = []
    for text, _ in ROUTE_CASES:
        subscriber = clients(broker.port)
        assert_ok(subscriber.command({"Command": "RegSub", "Topic": topic, "Filter": text}))
        subscribers.append(subscriber)
    publisher = clients(broker.port)
    _publish_all(publisher, topic, PAYLOADS)
    for subscriber, (text, expected_ids) in zip(subscribers, ROUTE_CASES, strict=True):
        subscriber.sync(publisher)
        got = [_id_of(m.payload) for m in subscriber.deliveries(topic)]
        assert got == expected_ids, f"filter {text!r}"
