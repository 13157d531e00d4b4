"""Subscription points: named topic spaces (design §5, mq-reference §6). The broker has two
listeners, one at the default point ``""`` and one at ``scores``; a third point ``spare`` is
declared but has no listener. Undeclared points are 3309."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import ClientFactory, start_broker
from .helpers import BrokerProcess, assert_error, assert_ok, unique

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(
        tmp_path_factory,
        'name = "QM.POINTS"\nsub_points = ["scores", "spare"]\n[sys]\ninterval = 0\n',
        sub_points_of_ports=("", "scores"),
    )
    yield process
    process.finalize()


def _ports(broker: BrokerProcess) -> tuple[int, int]:
    return broker.ports[0], broker.ports[1]


def test_sub_point_isolates_publications(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    default_port, scores_port = _ports(broker)
    topic = unique("sp/iso/")
    at_default = clients(default_port)
    at_scores = clients(default_port)
    assert_ok(at_default.command({"Command": "RegSub", "Topic": topic}, form=form))
    assert_ok(
        at_scores.command({"Command": "RegSub", "Topic": topic, "SubPoint": "scores"}, form=form)
    )
    default_publisher = clients(default_port)
    scores_publisher = clients(scores_port)
    default_publisher.publish(topic, b"default point", qos=1)
    scores_publisher.publish(topic, b"scores point", qos=1)
    # Both publications are acknowledged, so routed: a sentinel sent now arrives after them.
    for subscriber in (at_default, at_scores):
        subscriber.sync()
    assert [m.payload for m in at_default.deliveries(topic)] == [b"default point"]
    assert [m.payload for m in at_scores.deliveries(topic)] == [b"scores point"]


def test_listener_sub_point_is_the_default_for_commands_and_mqtt(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    default_port, scores_port = _ports(broker)
    topic = unique("sp/listener/")
    mq_subscriber = clients(scores_port)
    assert_ok(mq_subscriber.command({"Command": "RegSub", "Topic": topic}, form=form))
    listed = mq_subscriber.list_subs(QName=mq_subscriber.client_id, Topic=topic)
    assert [s.get("SubPoint") for s in listed] == [["scores"]]
    mqtt_subscriber = clients(scores_port)
    mqtt_subscriber.subscribe(topic, 1)
    default_publisher = clients(default_port)
    scores_publisher = clients(scores_port)
    default_publisher.publish(topic, b"default point", qos=1)
    scores_publisher.publish(topic, b"scores point", qos=1)
    # A Publish command takes the point of the listener it arrives on.
    assert_ok(
        scores_publisher.command(
            {"Command": "Publish", "Topic": topic}, form=form, body=b"scores command"
        )
    )
    assert_ok(
        default_publisher.command(
            {"Command": "Publish", "Topic": topic}, form=form, body=b"default command"
        )
    )
    for subscriber in (mq_subscriber, mqtt_subscriber):
        subscriber.sync()
        assert [m.payload for m in subscriber.deliveries(topic)] == [
            b"scores point",
            b"scores command",
        ]


def test_retained_publications_are_per_sub_point(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    default_port, scores_port = _ports(broker)
    topic = unique("sp/ret/")
    clients(default_port).publish(topic, b"default state", qos=1, retain=True)
    clients(scores_port).publish(topic, b"scores state", qos=1, retain=True)
    at_default = clients(default_port)
    at_scores = clients(default_port)
    assert_ok(at_default.command({"Command": "RegSub", "Topic": topic}, form=form))
    assert_ok(
        at_scores.command(
            {"Command": "RegSub", "Topic": topic, "SubPoint": "scores", "RegOpt": "PubOnReqOnly"},
            form=form,
        )
    )
    assert [m.payload for m in at_default.wait_deliveries(1, topic)] == [b"default state"]
    assert_ok(
        at_scores.command({"Command": "ReqUpdate", "Topic": topic, "SubPoint": "scores"}, form=form)
    )
    assert [m.payload for m in at_scores.wait_deliveries(1, topic)] == [b"scores state"]
    # DeletePub at one point leaves the other point's publication.
    assert_ok(
        at_scores.command({"Command": "DeletePub", "Topic": topic, "SubPoint": "scores"}, form=form)
    )
    reply = at_scores.command(
        {"Command": "ReqUpdate", "Topic": topic, "SubPoint": "scores"}, form=form
    )
    assert reply.completion == "error" and reply.reasons == [3077], str(reply)
    late = clients(default_port)
    late.subscribe(topic, 1)
    assert [m.payload for m in late.wait_deliveries(1, topic)] == [b"default state"]


def test_subscriptions_are_keyed_by_sub_point(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("sp/key/")
    name = unique("n")
    for point in ("", "scores", "spare"):
        reply = client.command(
            {
                "Command": "RegSub",
                "Topic": topic,
                "QName": queue,
                "SubPoint": point,
                "SubName": name,
            },
            form=form,
        )
        assert_ok(reply)
    points = sorted(s.get("SubPoint", [""])[0] for s in client.list_subs(QName=queue))
    assert points == ["", "scores", "spare"], "SubName is unique per subscription point"
    # DeregSub must give the point the subscription was registered at.
    reply = client.command(
        {"Command": "DeregSub", "Topic": topic, "QName": queue, "SubPoint": "scores"},
        form=form,
    )
    assert_ok(reply)
    reply = client.command(
        {"Command": "DeregSub", "Topic": topic, "QName": queue, "SubPoint": "scores"},
        form=form,
    )
    assert_error(reply, 3073)
    points = sorted(s.get("SubPoint", [""])[0] for s in client.list_subs(QName=queue))
    assert points == ["", "spare"]


@pytest.mark.parametrize(
    "psc",
    [
        {"Command": "RegSub"},
        {"Command": "DeregSub"},
        {"Command": "ReqUpdate"},
        {"Command": "DeletePub"},
    ],
    ids=lambda psc: psc["Command"],
)
def test_undeclared_sub_point_is_3309(
    broker: BrokerProcess, clients: ClientFactory, form: str, psc: dict[str, str]
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    full = {**psc, "Topic": unique("sp/undeclared/"), "SubPoint": "nowhere"}
    if psc["Command"] != "DeletePub":
        full["QName"] = queue
    response = assert_error(client.command(full, form=form), 3309)
    assert response.get("SubPoint") == "nowhere"
    assert client.list_subs(QName=queue) == []
