"""RegSub, DeregSub and ReqUpdate: every registration option and their reason codes
(mq-reference §2.1-2.3, §4; the seed's Register Subscriber page), in the XML and JSON forms."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import ClientFactory, start_broker
from .helpers import (
    BrokerProcess,
    MQClient,
    assert_error,
    assert_ok,
    assert_warning,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

QMGR = "QM.REGSUB"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory, f'name = "{QMGR}"\n[sys]\ninterval = 0\n')
    yield process
    process.finalize()


def _subs(client: MQClient, queue: str, topic: str | None = None) -> list[dict[str, list[str]]]:
    if topic is None:
        return client.list_subs(QName=queue)
    return client.list_subs(QName=queue, Topic=topic)


def _options(client: MQClient, queue: str, topic: str) -> set[str]:
    listed = _subs(client, queue, topic)
    assert len(listed) == 1, listed
    return set(listed[0].get("RegOpt", []))


# -- retained publications at registration: default, InformIfRet, NewPubsOnly, None ---------


def test_default_registration_sends_retained_unmarked(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/ret/")
    publisher.publish(f"{topic}/a", b"kept", qos=1, retain=True)
    subscriber = clients(broker.port)
    assert_ok(subscriber.command({"Command": "RegSub", "Topic": f"{topic}/#"}, form=form))
    got = subscriber.wait_deliveries(1, topic)
    assert [(m.topic, m.payload, m.retain) for m in got] == [(f"{topic}/a", b"kept", False)], (
        "an MQ subscription without InformIfRet gets retained copies with RETAIN=0"
    )


def test_inform_if_ret_marks_retained_copies_only(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/inform/")
    publisher.publish(f"{topic}/a", b"kept", qos=1, retain=True)
    subscriber = clients(broker.port)
    reply = subscriber.command(
        {"Command": "RegSub", "Topic": f"{topic}/#", "RegOpt": "InformIfRet"}, form=form
    )
    assert_ok(reply)
    got = subscriber.wait_deliveries(1, topic)
    assert [(m.payload, m.retain) for m in got] == [(b"kept", True)]
    publisher.publish(f"{topic}/b", b"live", qos=1)
    got = subscriber.wait_deliveries(2, topic)
    assert [(m.payload, m.retain) for m in got] == [(b"kept", True), (b"live", False)]


def test_mqtt_subscribe_always_marks_retained(
    broker: BrokerProcess, clients: ClientFactory
) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/mqtt/")
    publisher.publish(topic, b"kept", qos=1, retain=True)
    subscriber = clients(broker.port)
    subscriber.subscribe(topic, 1)
    got = subscriber.wait_deliveries(1, topic)
    assert [(m.payload, m.retain) for m in got] == [(b"kept", True)]


def test_new_pubs_only_skips_retained(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/new/")
    publisher.publish(f"{topic}/a", b"old", qos=1, retain=True)
    subscriber = clients(broker.port)
    reply = subscriber.command(
        {"Command": "RegSub", "Topic": f"{topic}/#", "RegOpt": "NewPubsOnly"}, form=form
    )
    assert_ok(reply)
    publisher.publish(f"{topic}/a", b"new", qos=1)
    got = subscriber.wait_deliveries(1, topic)
    subscriber.sync(publisher)
    assert [m.payload for m in subscriber.deliveries(topic)] == [b"new"]
    assert got[0].retain is False


def test_none_is_ignored_when_combined(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/none/")
    publisher.publish(topic, b"old", qos=1, retain=True)
    subscriber = clients(broker.port)
    reply = subscriber.command(
        {"Command": "RegSub", "Topic": topic, "RegOpt": ["None", "NewPubsOnly"]}, form=form
    )
    assert_ok(reply)
    subscriber.sync(publisher)
    assert subscriber.deliveries(topic) == [], "NewPubsOnly applies; None is ignored"
    assert "NewPubsOnly" in _options(subscriber, subscriber.client_id, topic)


def test_none_resets_options_and_omitted_regopt_keeps_them(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("rs/reset/")
    base = {"Command": "RegSub", "Topic": topic, "QName": queue}
    assert_ok(client.command({**base, "RegOpt": ["InformIfRet", "NewPubsOnly", "Pers"]}, form=form))
    assert {"InformIfRet", "NewPubsOnly", "Pers"} <= _options(client, queue, topic)
    # RegOpt omitted on an existing subscription: its options do not change (seed).
    assert_ok(client.command(base, form=form))
    assert {"InformIfRet", "NewPubsOnly", "Pers"} <= _options(client, queue, topic)
    # RegOpt None: every option back to its default (PersAsPub and nothing else).
    assert_ok(client.command({**base, "RegOpt": "None"}, form=form))
    assert _options(client, queue, topic) == {"PersAsPub"}


def test_last_persistence_option_wins(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    cases = {
        ("Pers", "NonPers"): "NonPers",
        ("NonPers", "Pers"): "Pers",
        ("PersAsQueue", "PersAsPub"): "PersAsPub",
        ("NonPers", "PersAsPub", "PersAsQueue"): "PersAsQueue",
    }
    for options, winner in cases.items():
        topic = unique("rs/pers/")
        reply = client.command(
            {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": list(options)},
            form=form,
        )
        assert_ok(reply)
        persistence = _options(client, queue, topic) & {
            "Pers",
            "NonPers",
            "PersAsPub",
            "PersAsQueue",
        }
        assert persistence == {winner}, f"{options}: {persistence}"


# -- PubOnReqOnly, CorrelAsId and ReqUpdate: the seed's soccer example ---------------------

SEED_PSC = b"""
 <psc>
  <Command>RegSub</Command>
  <RegOpt>PubOnReqOnly</RegOpt>
  <RegOpt>CorrelAsId</RegOpt>
  <Topic>Sport/Soccer/State/LatestScore/#</Topic>
 </psc>"""


@pytest.mark.parametrize("update_form", ["xml", "json"])
def test_seed_example_pub_on_req_only_with_correl_as_id(
    broker: BrokerProcess, clients: ClientFactory, update_form: str
) -> None:
    correl = "0A0B" + unique("")[:8].upper()
    match = unique("Team")
    scores = {
        f"Sport/Soccer/State/LatestScore/{match}1 {match}2": b"3-1",
        f"Sport/Soccer/State/LatestScore/{match}3 {match}4": b"0-0",
    }
    publisher = clients(broker.port)
    for topic, score in scores.items():
        publisher.publish(topic, score, qos=1, retain=True)
    service = clients(broker.port, clean=False)
    # The seed's <psc>, verbatim; the identity (queue, CorrelId) comes from the MQMD defaults.
    payload = f"<mqmd><CorrelId>{correl}</CorrelId></mqmd>".encode() + SEED_PSC
    reply = service.send_raw(payload, correl_id=correl)
    assert_ok(reply)
    assert reply.correl_id.upper() == correl
    # PubOnReqOnly: no retained copies at registration, and live publications are not sent.
    publisher.publish(f"Sport/Soccer/State/LatestScore/{match}1 {match}2", b"4-1", qos=1)
    service.sync(publisher)
    assert service.deliveries("Sport/") == []

    topic_filter = "Sport/Soccer/State/LatestScore/#"
    # Another identity (no CorrelAsId, or another CorrelId) has no such subscription.
    reply = service.command({"Command": "ReqUpdate", "Topic": topic_filter}, form=update_form)
    assert_error(reply, 3073)
    reply = service.command(
        {"Command": "ReqUpdate", "Topic": topic_filter, "RegOpt": "CorrelAsId"},
        form=update_form,
        mqmd={"CorrelId": "0C0D"},
    )
    assert_error(reply, 3073)
    service.sync(publisher)
    assert service.deliveries("Sport/") == []

    reply = service.command(
        {"Command": "ReqUpdate", "Topic": topic_filter, "RegOpt": "CorrelAsId"},
        form=update_form,
        mqmd={"CorrelId": correl},
    )
    assert_ok(reply)
    assert reply.correl_id.upper() == correl
    got = service.wait_deliveries(2, f"Sport/Soccer/State/LatestScore/{match}")
    assert {m.topic: m.payload for m in got} == scores
    assert all(m.qos == 1 and not m.retain for m in got), got
    service.sync(publisher)
    assert len(service.deliveries(f"Sport/Soccer/State/LatestScore/{match}")) == 2

    reply = service.command(
        {"Command": "DeregSub", "Topic": topic_filter, "RegOpt": "CorrelAsId"},
        form=update_form,
        mqmd={"CorrelId": correl},
    )
    assert_ok(reply)
    for topic in scores:
        assert_ok(publisher.command({"Command": "DeletePub", "Topic": topic}))


def test_req_update_with_inform_if_ret_marks_copies(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/upd/")
    publisher.publish(topic, b"state", qos=1, retain=True)
    subscriber = clients(broker.port)
    base = {"Command": "RegSub", "Topic": topic}
    assert_ok(subscriber.command({**base, "RegOpt": ["PubOnReqOnly", "InformIfRet"]}, form=form))
    subscriber.sync(publisher)
    assert subscriber.deliveries(topic) == []
    assert_ok(subscriber.command({"Command": "ReqUpdate", "Topic": topic}, form=form))
    got = subscriber.wait_deliveries(1, topic)
    assert [(m.payload, m.retain) for m in got] == [(b"state", True)]


def test_req_update_without_retained_fails_3077(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """IBM: with no matching retained publication "the request fails with return code
    MQRCCF_NO_RETAINED_MSG": completion error, not a warning."""
    client = clients(broker.port)
    topic = unique("rs/noret/")
    assert_ok(
        client.command({"Command": "RegSub", "Topic": topic, "RegOpt": "PubOnReqOnly"}, form=form)
    )
    reply = client.command({"Command": "ReqUpdate", "Topic": topic}, form=form)
    assert_error(reply, 3077)


def test_req_update_without_subscription_is_3073(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/unreg/")
    publisher.publish(topic, b"state", qos=1, retain=True)
    client = clients(broker.port)
    assert_error(client.command({"Command": "ReqUpdate", "Topic": topic}, form=form), 3073)
    # Registered for a different topic (or filter) is not the same subscription.
    assert_ok(client.command({"Command": "RegSub", "Topic": f"{topic}/#"}, form=form))
    assert_error(client.command({"Command": "ReqUpdate", "Topic": topic}, form=form), 3073)


def test_req_update_by_sub_name(broker: BrokerProcess, clients: ClientFactory, form: str) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/byname/")
    publisher.publish(f"{topic}/x", b"state", qos=1, retain=True)
    client = clients(broker.port)
    name = unique("name")
    reply = client.command(
        {"Command": "RegSub", "Topic": f"{topic}/#", "SubName": name, "RegOpt": "PubOnReqOnly"},
        form=form,
    )
    assert_ok(reply)
    assert_ok(client.command({"Command": "ReqUpdate", "SubName": name}, form=form))
    assert [m.payload for m in client.wait_deliveries(1, topic)] == [b"state"]


def test_req_update_by_sub_name_is_for_the_subscriptions_own_topic(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """A SubName addresses one subscription: the update is of its topic. Another Topic (or
    `#`) would hand out retained publications the subscription never covered: 3073; more
    than one Topic: 3072."""
    publisher = clients(broker.port)
    mine = unique("rs/own/")
    other = unique("rs/other/")
    publisher.publish(mine, b"mine", qos=1, retain=True)
    publisher.publish(other, b"not mine", qos=1, retain=True)
    client = clients(broker.port)
    name = unique("name")
    reply = client.command(
        {"Command": "RegSub", "Topic": mine, "SubName": name, "RegOpt": "PubOnReqOnly"},
        form=form,
    )
    assert_ok(reply)
    by_name = {"Command": "ReqUpdate", "SubName": name}
    assert_error(client.command({**by_name, "Topic": other}, form=form), 3073)
    assert_error(client.command({**by_name, "Topic": "#"}, form=form), 3073)
    assert_error(client.command({**by_name, "Topic": [mine, other]}, form=form), 3072)
    assert_ok(client.command({**by_name, "Topic": mine}, form=form))
    assert [m.payload for m in client.wait_deliveries(1, mine)] == [b"mine"]
    client.sync(publisher)
    assert [m.topic for m in client.deliveries()] == [mine]


def test_correl_as_id_identities_share_one_queue(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("rs/correl/")
    base = {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "CorrelAsId"}
    assert_ok(client.command(base, form=form, mqmd={"CorrelId": "01AA"}))
    assert_ok(client.command(base, form=form, mqmd={"CorrelId": "02BB"}))
    listed = _subs(client, queue, topic)
    assert sorted(s.get("CorrelId", [""])[0].upper() for s in listed) == ["01AA", "02BB"]
    # The identity without CorrelId has no subscription; each CorrelId names its own.
    dereg = {"Command": "DeregSub", "Topic": topic, "QName": queue}
    assert_error(client.command(dereg, form=form), 3073)
    assert_ok(
        client.command({**dereg, "RegOpt": "CorrelAsId"}, form=form, mqmd={"CorrelId": "01AA"})
    )
    listed = _subs(client, queue, topic)
    assert [s.get("CorrelId", [""])[0].upper() for s in listed] == ["02BB"]


@pytest.mark.parametrize("correl", ["0000", "00", None])
def test_correl_as_id_without_nonzero_correl_id_is_3080(
    broker: BrokerProcess, clients: ClientFactory, form: str, correl: str | None
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    psc = {"Command": "RegSub", "Topic": unique("rs/zero/"), "QName": queue, "RegOpt": "CorrelAsId"}
    if correl is None:
        reply = client.command(psc, form=form, correl=False)
    else:
        reply = client.command(psc, form=form, mqmd={"CorrelId": correl})
    assert_error(reply, 3080)
    assert client.list_subs(QName=queue) == []


# -- FullResp, option errors (3083), topic errors (3072), filter errors (3150) -------------


def test_full_resp_returns_every_attribute(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("rs/full/")
    name = unique("full")
    reply = client.command(
        {
            "Command": "RegSub",
            "Topic": topic,
            "QName": queue,
            "SubName": name,
            "SubUserData": "user data",
            "Filter": "temp > 30",
            "RegOpt": ["FullResp", "InformIfRet", "Pers"],
        },
        form=form,
    )
    assert_ok(reply)
    assert reply.prop("Topic") == [topic]
    assert reply.prop("QName") == [queue]
    assert reply.prop("QMgrName") == [QMGR]
    assert reply.prop("SubName") == [name]
    assert reply.prop("SubUserData") == ["user data"]
    assert reply.prop("Filter") == ["temp > 30"]
    assert {"InformIfRet", "Pers"} <= set(reply.prop("RegOpt"))
    # DeregSub FullResp describes the subscription it removed.
    reply = client.command(
        {"Command": "DeregSub", "SubName": name, "RegOpt": "FullResp"}, form=form
    )
    assert_ok(reply)
    assert reply.prop("Topic") == [topic]


@pytest.mark.parametrize(
    ("psc", "why"),
    [
        ({"Command": "RegSub", "Topic": ["rs/a", "rs/b"], "RegOpt": "FullResp"}, "FullResp x2"),
        ({"Command": "RegSub", "Topic": "rs/a", "RegOpt": "AddName"}, "AddName, no SubName"),
        ({"Command": "RegSub", "Topic": "rs/a", "RegOpt": "Bogus"}, "unknown RegOpt"),
        ({"Command": "RegSub", "Topic": "rs/a", "RegOpt": "DeregAll"}, "DeregAll on RegSub"),
        ({"Command": "DeregSub", "RegOpt": ["DeregAll", "FullResp"]}, "FullResp + DeregAll"),
        ({"Command": "DeregSub", "Topic": "rs/a", "RegOpt": "Bogus"}, "unknown RegOpt"),
        ({"Command": "ReqUpdate", "Topic": "rs/a", "RegOpt": "Bogus"}, "unknown RegOpt"),
    ],
)
def test_registration_option_errors_are_3083(
    broker: BrokerProcess,
    clients: ClientFactory,
    form: str,
    psc: dict[str, str | list[str]],
    why: str,
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    reply = client.command({**psc, "QName": queue}, form=form)
    assert_error(reply, 3083)
    assert client.list_subs(QName=queue) == [], why


@pytest.mark.parametrize(
    "topics",
    [[], [""], ["rs/#/x"], ["rs/a+"], ["rs/ok", "rs/#/bad"]],
    ids=["missing", "empty", "hash-not-last", "plus-in-level", "one-bad-of-two"],
)
def test_topic_errors_are_3072_and_nothing_is_registered(
    broker: BrokerProcess, clients: ClientFactory, form: str, topics: list[str]
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    psc: dict[str, str | list[str]] = {"Command": "RegSub", "QName": queue}
    if topics:
        psc["Topic"] = topics
    assert_error(client.command(psc, form=form), 3072)
    assert client.list_subs(QName=queue) == [], "an error reply means nothing was processed"


@pytest.mark.parametrize(
    "text", ["temp >", "temp > 30 AND", "(temp > 1", "temp LIKE 5", "a = 'unterminated"]
)
def test_filter_syntax_error_is_3150_with_position(
    broker: BrokerProcess, clients: ClientFactory, form: str, text: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    reply = client.command(
        {"Command": "RegSub", "Topic": unique("rs/f/"), "QName": queue, "Filter": text},
        form=form,
    )
    response = assert_error(reply, 3150)
    assert str(response.get("Position", "")).isdigit(), str(reply)
    assert 0 <= int(response["Position"]) <= len(text)
    assert client.list_subs(QName=queue) == []


# -- SubName, AddName (3083, 3152, 3153) ------------------------------------------------------


def test_add_name_names_an_unnamed_subscription(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("rs/add/")
    name = unique("n")
    base = {"Command": "RegSub", "Topic": topic, "QName": queue}
    assert_ok(client.command(base, form=form))
    # A SubName for an existing unnamed subscription without AddName: duplicate subscription.
    assert_error(client.command({**base, "SubName": name}, form=form), 3152)
    assert _subs(client, queue)[0].get("SubName", [""]) == [""]
    assert_ok(client.command({**base, "SubName": name, "RegOpt": "AddName"}, form=form))
    listed = _subs(client, queue)
    assert len(listed) == 1 and listed[0]["SubName"] == [name]
    # The name now addresses the subscription.
    assert_ok(client.command({"Command": "DeregSub", "SubName": name}, form=form))
    assert _subs(client, queue) == []


def test_add_name_refused_when_name_taken_or_already_named(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """A name used by another subscription: 3152 (the seed: a SubName whose new attributes
    match a different existing subscription); a subscription already named otherwise: 3152 as
    well (IBM: two names never refer to one subscription, MQRCCF_DUPLICATE_SUBSCRIPTION)."""
    client = clients(broker.port)
    queue = unique("q")
    topic_a = unique("rs/named/")
    topic_b = unique("rs/unnamed/")
    taken = unique("n")
    assert_ok(
        client.command(
            {"Command": "RegSub", "Topic": topic_a, "QName": queue, "SubName": taken}, form=form
        )
    )
    assert_ok(client.command({"Command": "RegSub", "Topic": topic_b, "QName": queue}, form=form))
    # The name belongs to another subscription.
    reply = client.command(
        {
            "Command": "RegSub",
            "Topic": topic_b,
            "QName": queue,
            "SubName": taken,
            "RegOpt": "AddName",
        },
        form=form,
    )
    assert_error(reply, 3152)
    # The subscription already has another name: neither AddName nor a plain RegSub gives it
    # a second one.
    for options in ({"RegOpt": "AddName"}, {}):
        reply = client.command(
            {"Command": "RegSub", "Topic": topic_a, "QName": queue, "SubName": unique("n")}
            | options,
            form=form,
        )
        assert_error(reply, 3152)
    names = {s["Topic"][0]: s.get("SubName", [""])[0] for s in _subs(client, queue)}
    assert names == {topic_a: taken, topic_b: ""}


def test_sub_name_beginning_mq_is_reserved_3153(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    reply = client.command(
        {"Command": "RegSub", "Topic": unique("rs/mq/"), "QName": queue, "SubName": "MQ.MINE"},
        form=form,
    )
    assert_error(reply, 3153)
    assert client.list_subs(QName=queue) == []


def test_sub_name_repoints_the_named_subscription(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    publisher = clients(broker.port)
    name = unique("n")
    old = unique("rs/old/")
    new = unique("rs/new/")
    assert_ok(client.command({"Command": "RegSub", "Topic": old, "SubName": name}, form=form))
    assert_ok(client.command({"Command": "RegSub", "Topic": new, "SubName": name}, form=form))
    listed = client.list_subs(SubName=name)
    assert [s["Topic"] for s in listed] == [[new]]
    publisher.publish(old, b"old topic", qos=1)
    publisher.publish(new, b"new topic", qos=1)
    client.wait_deliveries(1, new)
    client.sync(publisher)
    assert client.deliveries(old) == []


def test_a_sub_name_with_several_topics_is_3153(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """A SubName names one subscription: with several Topics it would name several."""
    client = clients(broker.port)
    queue = unique("q")
    name = unique("n")
    topics = [unique("rs/n1/"), unique("rs/n2/")]
    reply = client.command(
        {"Command": "RegSub", "Topic": topics, "QName": queue, "SubName": name}, form=form
    )
    assert_error(reply, 3153)
    assert client.list_subs(QName=queue) == []


def test_repointing_applies_the_new_options(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """Re-pointing by SubName is a re-registration: its RegOpt, SubUserData and persistence
    apply (here PubOnReqOnly: the new topic's retained publication is not sent)."""
    client = clients(broker.port)
    publisher = clients(broker.port)
    queue = unique("q")
    name = unique("n")
    old = unique("rs/from/")
    new = unique("rs/to/")
    publisher.publish(new, b"retained", qos=1, retain=True)
    base = {"Command": "RegSub", "QName": queue, "SubName": name}
    assert_ok(client.command({**base, "Topic": old}, form=form))
    reply = client.command(
        {
            **base,
            "Topic": new,
            "RegOpt": ["PubOnReqOnly", "NonPers"],
            "SubUserData": "moved",
        },
        form=form,
    )
    assert_ok(reply)
    listed = client.list_subs(SubName=name)
    assert [s["Topic"] for s in listed] == [[new]]
    assert {"PubOnReqOnly", "NonPers"} <= set(listed[0]["RegOpt"])
    assert listed[0].get("SubUserData") == ["moved"]
    receiver = clients(broker.port, queue, clean=False)  # the queue's session
    receiver.sync(publisher)
    assert receiver.deliveries(new) == []
    # NoAlter re-points and keeps the attributes.
    back = {**base, "Topic": old, "RegOpt": "NoAlter"}
    assert_ok(client.command(back, form=form))
    listed = client.list_subs(SubName=name)
    assert [s["Topic"] for s in listed] == [[old]]
    assert "PubOnReqOnly" in listed[0]["RegOpt"]


def test_dups_ok_is_accepted_and_kept(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("rs/dups/")
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "DupsOK"}, form=form
    )
    assert_ok(reply)
    assert "DupsOK" in _options(client, queue, topic)


def test_full_resp_with_several_topics_on_dereg_sub_is_3083(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topics = [unique("rs/f1/"), unique("rs/f2/")]
    assert_ok(client.command({"Command": "RegSub", "Topic": topics, "QName": queue}, form=form))
    reply = client.command(
        {"Command": "DeregSub", "Topic": topics, "QName": queue, "RegOpt": "FullResp"},
        form=form,
    )
    assert_error(reply, 3083)
    assert len(client.list_subs(QName=queue)) == 2


def test_sub_name_repointed_onto_another_subscription_is_3152(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    name = unique("n")
    first = unique("rs/first/")
    second = unique("rs/second/")
    assert_ok(
        client.command(
            {"Command": "RegSub", "Topic": first, "QName": queue, "SubName": name}, form=form
        )
    )
    assert_ok(client.command({"Command": "RegSub", "Topic": second, "QName": queue}, form=form))
    reply = client.command(
        {"Command": "RegSub", "Topic": second, "QName": queue, "SubName": name}, form=form
    )
    assert_error(reply, 3152)
    assert [s["Topic"] for s in client.list_subs(SubName=name)] == [[first]]


# -- NoAlter, Local ------------------------------------------------------------------------


def test_no_alter_keeps_the_existing_attributes(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("rs/noalter/")
    base = {"Command": "RegSub", "Topic": topic, "QName": queue}
    assert_ok(client.command({**base, "RegOpt": "InformIfRet", "SubUserData": "one"}, form=form))
    reply = client.command(
        {**base, "RegOpt": ["NoAlter", "NewPubsOnly", "NonPers"], "SubUserData": "two"},
        form=form,
    )
    assert_ok(reply)
    listed = _subs(client, queue)
    assert len(listed) == 1
    assert listed[0]["SubUserData"] == ["one"]
    options = set(listed[0]["RegOpt"])
    assert "InformIfRet" in options and "PersAsPub" in options
    assert not options & {"NewPubsOnly", "NonPers"}, options


def test_no_alter_is_ignored_when_creating(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    publisher = clients(broker.port)
    topic = unique("rs/noalter-new/")
    publisher.publish(topic, b"old", qos=1, retain=True)
    client = clients(broker.port)
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "RegOpt": ["NoAlter", "NewPubsOnly"]}, form=form
    )
    assert_ok(reply)
    client.sync(publisher)
    assert client.deliveries(topic) == [], "the other options apply to a new subscription"
    assert "NewPubsOnly" in _options(client, client.client_id, topic)


def test_local_subscription_is_kept_and_sees_local_publications(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    topic = unique("rs/local/")
    assert_ok(client.command({"Command": "RegSub", "Topic": topic, "RegOpt": "Local"}, form=form))
    assert "Local" in _options(client, client.client_id, topic)
    publisher = clients(broker.port)
    publisher.publish(topic, b"plain", qos=1)
    assert_ok(
        publisher.command(
            {"Command": "Publish", "Topic": topic, "PubOpt": "Local"}, form=form, body=b"local"
        )
    )
    got = client.wait_deliveries(2, topic)
    assert [m.payload for m in got] == [b"plain", b"local"]


# -- DeregSub: 3073, DeregAll ------------------------------------------------------------------


def test_dereg_sub_not_registered_is_3073_and_partial_is_a_warning(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    registered = unique("rs/reg/")
    missing = unique("rs/missing/")
    assert_ok(client.command({"Command": "RegSub", "Topic": registered, "QName": queue}, form=form))
    reply = client.command(
        {"Command": "DeregSub", "Topic": [registered, missing], "QName": queue}, form=form
    )
    responses = assert_warning(reply, 3073)
    assert responses[0].get("Topic") == missing
    assert reply.echo is not None and reply.echo.get("Topic") == [registered, missing]
    assert client.list_subs(QName=queue) == [], "the registered topic was deregistered"
    reply = client.command({"Command": "DeregSub", "Topic": registered, "QName": queue}, form=form)
    assert_error(reply, 3073)


def test_dereg_all_removes_what_matches(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    t1 = unique("rs/da1/")
    t2 = unique("rs/da2/")
    for topic, extra in ((t1, {}), (t1, {"Filter": "x = 1"}), (t2, {})):
        assert_ok(
            client.command(
                {"Command": "RegSub", "Topic": topic, "QName": queue, **extra}, form=form
            )
        )
    other_queue = unique("q")
    assert_ok(client.command({"Command": "RegSub", "Topic": t1, "QName": other_queue}, form=form))
    # DeregAll with a Topic: every subscription of the identity on that topic (any filter).
    reply = client.command(
        {"Command": "DeregSub", "Topic": t1, "QName": queue, "RegOpt": "DeregAll"}, form=form
    )
    assert_ok(reply)
    assert [s["Topic"] for s in client.list_subs(QName=queue)] == [[t2]]
    # DeregAll alone: everything of the identity.
    assert_ok(
        client.command({"Command": "DeregSub", "QName": queue, "RegOpt": "DeregAll"}, form=form)
    )
    assert client.list_subs(QName=queue) == []
    assert len(client.list_subs(QName=other_queue)) == 1, "other identities are untouched"
    reply = client.command({"Command": "DeregSub", "QName": queue, "RegOpt": "DeregAll"}, form=form)
    assert_error(reply, 3073)


def test_dereg_all_without_a_topic_removes_every_registration_of_the_queue(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """Registrations made under two CorrelIds and none: DeregAll alone removes them all
    (mq-reference §2.2); with CorrelAsId it removes only that CorrelId's."""
    client = clients(broker.port)
    queue = unique("q")
    topics = [unique("rs/dq/") for _ in range(4)]
    correl_a, correl_b = "0A0A", "0B0B"
    for topic, correl in zip(topics, (correl_a, correl_b, None, correl_a), strict=True):
        if correl is None:
            assert_ok(
                client.command({"Command": "RegSub", "Topic": topic, "QName": queue}, form=form)
            )
        else:
            command = {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "CorrelAsId"}
            assert_ok(client.command(command, form=form, mqmd={"CorrelId": correl}))
    assert len(client.list_subs(QName=queue)) == 4
    assert_ok(
        client.command(
            {"Command": "DeregSub", "QName": queue, "RegOpt": ["DeregAll", "CorrelAsId"]},
            form=form,
            mqmd={"CorrelId": correl_a},
        )
    )
    assert sorted(s["Topic"][0] for s in client.list_subs(QName=queue)) == sorted(topics[1:3])
    assert_ok(
        client.command({"Command": "DeregSub", "QName": queue, "RegOpt": "DeregAll"}, form=form)
    )
    assert client.list_subs(QName=queue) == []


def test_dereg_sub_must_name_the_filter(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("rs/filt/")
    assert_ok(
        client.command(
            {"Command": "RegSub", "Topic": topic, "QName": queue, "Filter": "x > 1"}, form=form
        )
    )
    dereg = {"Command": "DeregSub", "Topic": topic, "QName": queue}
    assert_error(client.command(dereg, form=form), 3073)
    assert_ok(client.command({**dereg, "Filter": "x > 1"}, form=form))
    assert client.list_subs(QName=queue) == []


def test_one_copy_per_queue(broker: BrokerProcess, clients: ClientFactory, form: str) -> None:
    subscriber = clients(broker.port)
    topic = unique("rs/once/")
    subscriber.subscribe(f"{topic}/#", 1)
    for topic_filter in (f"{topic}/#", f"{topic}/+", f"{topic}/a"):
        assert_ok(subscriber.command({"Command": "RegSub", "Topic": topic_filter}, form=form))
    publisher = clients(broker.port)
    publisher.publish(f"{topic}/a", b"once", qos=1)
    subscriber.wait_deliveries(1, topic)
    subscriber.sync(publisher)
    assert [m.payload for m in subscriber.deliveries(topic)] == [b"once"]


def test_dereg_all_is_ignored_when_topic_sub_point_and_filter_are_all_given(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("q")
    topic = unique("rs/exact/")
    for extra in ({}, {"Filter": "x = 1"}, {"Filter": "x = 2"}):
        assert_ok(
            client.command(
                {"Command": "RegSub", "Topic": topic, "QName": queue, **extra}, form=form
            )
        )
    reply = client.command(
        {
            "Command": "DeregSub",
            "Topic": topic,
            "QName": queue,
            "SubPoint": "",
            "Filter": "x = 1",
            "RegOpt": "DeregAll",
        },
        form=form,
    )
    assert_ok(reply)
    filters = sorted(s.get("Filter", [""])[0] for s in client.list_subs(QName=queue))
    assert filters == ["", "x = 2"], "only the one subscription named exactly is removed"


def test_sub_name_with_reply_to_q_moves_the_subscription_to_that_queue(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """The seed: a RegSub with an existing SubName, no QName and a ReplyToQ re-points the
    subscription to the ReplyToQ."""
    client = clients(broker.port)
    name = unique("n")
    topic = unique("rs/move/")
    first = unique("q")
    second = unique("q")
    client.subscribe(second, 1)  # the replies of the second RegSub go to topic `second`
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": first, "SubName": name}, form=form
    )
    assert_ok(reply)
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "SubName": name},
        form=form,
        mqmd={"ReplyToQ": second},
    )
    assert_ok(reply)
    assert [s["QName"] for s in client.list_subs(SubName=name)] == [[second]]
    receiver = clients(broker.port, second, clean=False)
    client.publish(topic, b"moved", qos=1)
    assert [m.payload for m in receiver.wait_deliveries(1, topic)] == [b"moved"]


def test_dereg_sub_by_unknown_sub_name_is_3073(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    reply = client.command({"Command": "DeregSub", "SubName": unique("nobody")}, form=form)
    assert_error(reply, 3073)
