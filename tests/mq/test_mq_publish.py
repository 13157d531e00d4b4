"""Publish and DeletePub on SYSTEM.BROKER.DEFAULT.STREAM: the body, PubOpt (RetainPub,
OtherSubsOnly, Local, None, IsRetainedPub from a client: 3084), wildcards (3072), DelOpt
(Local, None, others: 3087) and the publication's MQMD Expiry (mq-reference §1.3, §2.4-2.5)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest

from .conftest import ClientFactory, start_broker
from .helpers import (
    DEFAULT_STREAM,
    BrokerProcess,
    assert_error,
    assert_ok,
    unique,
    wait_until,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory, 'name = "QM.PUBLISH"\n[sys]\ninterval = 0\n')
    yield process
    process.finalize()


def test_publish_delivers_the_body(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    subscriber = clients(broker.port)
    topic = unique("pub/body/")
    subscriber.subscribe(topic, 2)
    publisher = clients(broker.port)
    body = b"<not a folder> 3-1 \xc3\xa9" if form == "xml" else "3-1 é".encode()
    assert_ok(publisher.command({"Command": "Publish", "Topic": topic}, form=form, body=body))
    got = subscriber.wait_deliveries(1, topic)
    assert [(m.payload, m.qos, m.retain) for m in got] == [(body, 1, False)], (
        "the body is delivered verbatim, at the QoS of the command message"
    )


def test_publish_json_body_base64(broker: BrokerProcess, clients: ClientFactory) -> None:
    subscriber = clients(broker.port)
    topic = unique("pub/b64/")
    subscriber.subscribe(topic, 1)
    publisher = clients(broker.port)
    body = bytes(range(256))
    payload = json.dumps(
        {
            "mqmd": {"CorrelId": "0B64"},
            "psc": {"Command": "Publish", "Topic": [topic]},
            "bodyBase64": base64.b64encode(body).decode(),
        }
    ).encode()
    assert_ok(publisher.send_raw(payload, DEFAULT_STREAM, correl_id="0B64"))
    assert [m.payload for m in subscriber.wait_deliveries(1, topic)] == [body]


def test_publish_to_several_topics(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    subscriber = clients(broker.port)
    base = unique("pub/multi/")
    subscriber.subscribe(f"{base}/#", 1)
    publisher = clients(broker.port)
    topics = [f"{base}/a", f"{base}/b"]
    assert_ok(publisher.command({"Command": "Publish", "Topic": topics}, form=form, body=b"x"))
    got = subscriber.wait_deliveries(2, base)
    assert sorted(m.topic for m in got) == topics


@pytest.mark.parametrize("topic", ["pub/+/x", "pub/#", "+", "#"])
def test_publish_with_a_wildcard_is_3072(
    broker: BrokerProcess, clients: ClientFactory, form: str, topic: str
) -> None:
    observer = clients(broker.port)
    observer.subscribe("pub/#", 1)
    publisher = clients(broker.port)
    reply = publisher.command({"Command": "Publish", "Topic": topic}, form=form, body=b"x")
    response = assert_error(reply, 3072)
    assert response.get("Topic") == topic
    observer.sync(publisher)
    assert [m for m in observer.deliveries("pub/") if not m.retain] == []


def test_publish_without_topic_is_3072(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    assert_error(publisher.command({"Command": "Publish"}, form=form, body=b"x"), 3072)


def test_retain_pub_keeps_the_publication(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    kept = unique("pub/kept/")
    passing = unique("pub/passing/")
    reply = publisher.command(
        {"Command": "Publish", "Topic": kept, "PubOpt": "RetainPub"}, form=form, body=b"state"
    )
    assert_ok(reply)
    assert_ok(publisher.command({"Command": "Publish", "Topic": passing}, form=form, body=b"p"))
    late = clients(broker.port)
    late.subscribe([(kept, 1), (passing, 1)])
    got = late.wait_deliveries(1, kept)
    assert [(m.payload, m.retain) for m in got] == [(b"state", True)]
    late.sync(publisher)
    assert late.deliveries(passing) == [], "without RetainPub nothing is kept"
    # ReqUpdate serves the retained publication too.
    assert_ok(late.command({"Command": "RegSub", "Topic": kept, "RegOpt": "PubOnReqOnly"}))
    assert_ok(late.command({"Command": "ReqUpdate", "Topic": kept}))


def test_other_subs_only_skips_the_publishers_queue(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    topic = unique("pub/conf/")
    publisher = clients(broker.port)
    assert_ok(publisher.command({"Command": "RegSub", "Topic": topic}, form=form))
    other = clients(broker.port)
    assert_ok(other.command({"Command": "RegSub", "Topic": topic}, form=form))
    reply = publisher.command(
        {"Command": "Publish", "Topic": topic, "PubOpt": "OtherSubsOnly"}, form=form, body=b"1"
    )
    assert_ok(reply)
    assert_ok(publisher.command({"Command": "Publish", "Topic": topic}, form=form, body=b"2"))
    assert [m.payload for m in other.wait_deliveries(2, topic)] == [b"1", b"2"]
    publisher.wait_deliveries(1, topic)
    publisher.sync(other)
    assert [m.payload for m in publisher.deliveries(topic)] == [b"2"]


@pytest.mark.parametrize("options", [["IsRetainedPub"], ["RetainPub", "IsRetainedPub"], ["Nope"]])
def test_publication_option_errors_are_3084(
    broker: BrokerProcess, clients: ClientFactory, form: str, options: list[str]
) -> None:
    observer = clients(broker.port)
    topic = unique("pub/opt/")
    observer.subscribe(topic, 1)
    publisher = clients(broker.port)
    reply = publisher.command(
        {"Command": "Publish", "Topic": topic, "PubOpt": options}, form=form, body=b"x"
    )
    assert_error(reply, 3084)
    observer.sync(publisher)
    assert observer.deliveries(topic) == [], "an error reply means nothing was published"


@pytest.mark.parametrize("options", [["None"], ["Local"], ["Local", "RetainPub"]])
def test_publication_options_none_and_local_are_accepted(
    broker: BrokerProcess, clients: ClientFactory, form: str, options: list[str]
) -> None:
    subscriber = clients(broker.port)
    topic = unique("pub/local/")
    subscriber.subscribe(topic, 1)
    publisher = clients(broker.port)
    reply = publisher.command(
        {"Command": "Publish", "Topic": topic, "PubOpt": options}, form=form, body=b"here"
    )
    assert_ok(reply)
    assert [m.payload for m in subscriber.wait_deliveries(1, topic)] == [b"here"]


def test_publish_correl_as_id_needs_a_correl_id_3080(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    psc = {"Command": "Publish", "Topic": unique("pub/c/"), "PubOpt": "CorrelAsId"}
    assert_error(publisher.command(psc, form=form, body=b"x", correl=False), 3080)
    assert_ok(publisher.command(psc, form=form, body=b"x", mqmd={"CorrelId": "0C"}))


def _retained_topics(clients: ClientFactory, port: int, topic_filter: str) -> list[str]:
    """The retained publications a new MQTT subscriber to ``topic_filter`` gets."""
    probe = clients(port)
    probe.subscribe(topic_filter, 1)
    probe.sync()
    return sorted(m.topic for m in probe.deliveries() if m.retain)


@pytest.mark.parametrize("del_options", [[], ["Local"], ["None"]])
def test_delete_pub_removes_only_the_listed_topics(
    broker: BrokerProcess, clients: ClientFactory, form: str, del_options: list[str]
) -> None:
    publisher = clients(broker.port)
    base = unique("pub/del/")
    topics = [f"{base}/a", f"{base}/b", f"{base}/c"]
    reply = publisher.command(
        {"Command": "Publish", "Topic": topics, "PubOpt": "RetainPub"}, form=form, body=b"s"
    )
    assert_ok(reply)
    assert _retained_topics(clients, broker.port, f"{base}/#") == topics
    psc: dict[str, str | list[str]] = {"Command": "DeletePub", "Topic": topics[:2]}
    if del_options:
        psc["DelOpt"] = del_options
    assert_ok(publisher.command(psc, form=form))
    assert _retained_topics(clients, broker.port, f"{base}/#") == topics[2:]


def test_delete_pub_with_a_wildcard(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    base = unique("pub/delw/")
    for leaf in ("x/1", "x/2", "y/1"):
        publisher.publish(f"{base}/{leaf}", b"s", qos=1, retain=True)
    assert_ok(publisher.command({"Command": "DeletePub", "Topic": f"{base}/x/#"}, form=form))
    assert _retained_topics(clients, broker.port, f"{base}/#") == [f"{base}/y/1"]
    # Nothing retained any more under the subscription's topic: ReqUpdate says so.
    assert_ok(
        publisher.command(
            {"Command": "RegSub", "Topic": f"{base}/x/#", "RegOpt": "PubOnReqOnly"}, form=form
        )
    )
    assert_error(
        publisher.command({"Command": "ReqUpdate", "Topic": f"{base}/x/#"}, form=form), 3077
    )


@pytest.mark.parametrize("del_options", [["Global"], ["Local", "Bogus"]])
def test_delete_option_errors_are_3087(
    broker: BrokerProcess, clients: ClientFactory, form: str, del_options: list[str]
) -> None:
    publisher = clients(broker.port)
    topic = unique("pub/delopt/")
    publisher.publish(topic, b"s", qos=1, retain=True)
    reply = publisher.command(
        {"Command": "DeletePub", "Topic": topic, "DelOpt": del_options}, form=form
    )
    assert_error(reply, 3087)
    assert _retained_topics(clients, broker.port, topic) == [topic], "nothing was deleted"


def test_publication_expiry_ends_the_retained_publication(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """MQMD Expiry on Publish is the lifetime of the publication (mq-reference §1.3, §6)."""
    publisher = clients(broker.port)
    topic = unique("pub/exp/")
    reply = publisher.command(
        {"Command": "Publish", "Topic": topic, "PubOpt": "RetainPub"},
        form=form,
        body=b"short-lived",
        mqmd={"Expiry": "2"},
    )
    assert_ok(reply)
    assert wait_until(lambda: _retained_topics(clients, broker.port, topic) == [], 4), (
        "a retained publication with Expiry 2 (0.2 s) is still served after 4 s"
    )
