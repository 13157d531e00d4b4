"""The command envelope: where replies go, CorrelId, request/datagram, QoS, wrong queue (3079),
queue manager and queue names (3074, 3076), queues as sessions, and malformed command messages
answered with 3097 while the broker carries on (design §5-6, mq-reference §1, §3)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from .conftest import ClientFactory, start_broker
from .helpers import (
    CONTROL_QUEUE,
    DEFAULT_STREAM,
    RESPONSE_PREFIX,
    BrokerProcess,
    assert_error,
    assert_ok,
    build_command,
    unique,
    wait_until,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

QMGR = "QM.ENVELOPE"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory, f'name = "{QMGR}"\n[sys]\ninterval = 0.5\n')
    yield process
    process.finalize()


def test_reply_goes_to_the_response_topic_with_the_correl_id(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    reply = client.command(
        {"Command": "RegSub", "Topic": unique("env/")},
        form=form,
        mqmd={"CorrelId": "0A0B0C0D"},
    )
    assert_ok(reply)
    assert reply.topic == RESPONSE_PREFIX + client.client_id
    assert reply.form == form, "the reply comes back in the form of the request"
    assert reply.correl_id.upper() == "0A0B0C0D"
    assert reply.echo is None, "an ok reply does not echo the command"


def test_reply_to_q_is_the_reply_topic_and_the_default_queue(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    queue = unique("rq")
    receiver = clients(broker.port, queue, clean=False)
    receiver.subscribe(queue, 1)
    requester = clients(broker.port)
    requester.subscribe(queue, 1)
    topic = unique("env/rq/")
    reply = requester.command(
        {"Command": "RegSub", "Topic": topic}, form=form, mqmd={"ReplyToQ": queue}
    )
    assert_ok(reply)
    assert reply.topic == queue
    assert requester.replies() == [], "nothing goes to the default response topic"
    # The subscription was registered for queue = ReplyToQ: the session of that name gets it.
    requester.publish(topic, b"to the reply queue", qos=1)
    got = receiver.wait_deliveries(1, topic)
    assert [m.payload for m in got] == [b"to the reply queue"]
    requester.sync(requester)
    assert requester.deliveries(topic) == [], "the requester's own queue is not the subscriber"


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_reply_is_published_at_the_qos_of_the_command(
    broker: BrokerProcess, clients: ClientFactory, qos: int
) -> None:
    client = clients(broker.port)
    reply = client.command({"Command": "RegSub", "Topic": unique("env/qos/")}, qos=qos)
    assert_ok(reply)
    assert reply.qos == qos


def test_datagram_gets_a_reply_only_on_warning_or_error(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("dg")
    topic = unique("env/dg/")
    # ok datagram: executed, no reply.
    client.send(
        build_command(
            form,
            {"Command": "RegSub", "Topic": topic, "QName": queue},
            {"MsgType": "datagram", "CorrelId": "D1"},
        ),
    )
    # A request sent after it: its reply is the first one; the datagram never got one.
    assert_ok(
        client.command(
            {"Command": "RegSub", "Topic": unique("env/"), "QName": queue},
            form=form,
            mqmd={"CorrelId": "D2"},
        )
    )
    assert [r.correl_id for r in client.replies()] == ["D2"]
    assert any(s["Topic"] == [topic] for s in client.list_subs(QName=queue)), "not executed"
    # error datagram: answered.
    reply = client.command(
        {"Command": "RegSub", "Topic": "env/#/bad"},
        form=form,
        mqmd={"MsgType": "datagram", "CorrelId": "D3"},
    )
    assert_error(reply, 3072)
    assert reply.correl_id == "D3"
    # warning datagram (DeregSub of a registered and an unregistered topic): answered.
    missing = unique("env/none/")
    reply = client.command(
        {"Command": "DeregSub", "Topic": [topic, missing], "QName": queue},
        form=form,
        mqmd={"MsgType": "datagram", "CorrelId": "D4"},
    )
    assert reply.completion == "warning", str(reply)
    assert reply.reasons == [3073]


@pytest.mark.parametrize(
    ("command", "queue"),
    [
        ("RegSub", DEFAULT_STREAM),
        ("DeregSub", DEFAULT_STREAM),
        ("ReqUpdate", DEFAULT_STREAM),
        ("Publish", CONTROL_QUEUE),
        ("DeletePub", CONTROL_QUEUE),
    ],
)
def test_command_on_the_wrong_queue_is_3079(
    broker: BrokerProcess, clients: ClientFactory, form: str, command: str, queue: str
) -> None:
    client = clients(broker.port)
    target = unique("wq")
    topic = unique("env/wq/")
    reply = client.command(
        {"Command": command, "Topic": topic, "QName": target}
        if command in ("RegSub", "DeregSub", "ReqUpdate")
        else {"Command": command, "Topic": topic},
        form=form,
        topic=queue,
        body=b"x" if command == "Publish" else b"",
    )
    assert_error(reply, 3079)
    assert reply.echo is not None and reply.echo.get("Command") == [command]
    if command == "RegSub":
        assert client.list_subs(QName=target) == [], "nothing was registered"


def test_command_messages_are_consumed_not_routed_or_retained(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    observer = clients(broker.port)
    observer.subscribe([(CONTROL_QUEUE, 1), (DEFAULT_STREAM, 1), ("#", 1)])
    client = clients(broker.port)
    topic = unique("env/consumed/")
    assert_ok(client.command({"Command": "RegSub", "Topic": topic}, form=form))
    assert_ok(client.command({"Command": "Publish", "Topic": topic}, form=form, body=b"b"))
    # A command sent with RETAIN=1 is executed, and not kept as a retained message.
    payload = build_command(
        form, {"Command": "RegSub", "Topic": unique("env/")}, {"CorrelId": "AB"}
    )
    client.publish(CONTROL_QUEUE, payload, qos=1, retain=True)
    assert wait_until(lambda: any(r.correl_id == "AB" for r in client.replies()), 10)
    observer.sync(client)
    seen = [m.topic for m in observer.messages if m.topic in (CONTROL_QUEUE, DEFAULT_STREAM)]
    assert seen == [], f"command messages were routed to a subscriber: {seen}"
    late = clients(broker.port)
    late.subscribe([(CONTROL_QUEUE, 1), (DEFAULT_STREAM, 1)])
    late.sync(client)
    assert [m for m in late.messages if m.topic == CONTROL_QUEUE] == []


def test_qmgr_name_other_than_this_broker_is_3074(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("qm")
    topic = unique("env/qm/")
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "QMgrName": QMGR}, form=form
    )
    assert_ok(reply)
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "QMgrName": "OTHER.QM"}, form=form
    )
    response = assert_error(reply, 3074)
    assert response.get("QMgrName") == "OTHER.QM"
    # The default QMgrName is the MQMD ReplyToQMgr.
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue},
        form=form,
        mqmd={"ReplyToQMgr": "OTHER.QM"},
    )
    assert_error(reply, 3074)
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue},
        form=form,
        mqmd={"ReplyToQMgr": QMGR},
    )
    assert_ok(reply)


@pytest.mark.parametrize("queue", ["bad#queue", "bad+queue"])
def test_bad_queue_name_is_3076(
    broker: BrokerProcess, clients: ClientFactory, form: str, queue: str
) -> None:
    client = clients(broker.port)
    reply = client.command(
        {"Command": "RegSub", "Topic": unique("env/q/"), "QName": queue}, form=form
    )
    assert_error(reply, 3076)


def test_regsub_for_a_queue_without_session_creates_a_durable_one(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("dq")
    topic = unique("env/dq/")
    assert_ok(client.command({"Command": "RegSub", "Topic": topic, "QName": queue}, form=form))
    client.publish(topic, b"queued while nobody is connected", qos=1)
    subscriber = clients(broker.port, queue, clean=False, connect=False)
    assert subscriber.connect() is True, "the session of the queue exists (session present)"
    got = subscriber.wait_deliveries(1, topic)
    assert [(m.payload, m.qos) for m in got] == [(b"queued while nobody is connected", 1)]


def test_default_queue_is_the_client_id(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    topic = unique("env/own/")
    assert_ok(client.command({"Command": "RegSub", "Topic": topic}, form=form))
    client.publish(topic, b"mine", qos=1)
    assert [m.payload for m in client.wait_deliveries(1, topic)] == [b"mine"]


def test_clean_session_queue_is_temporary(broker: BrokerProcess, clients: ClientFactory) -> None:
    temporary = clients(broker.port, unique("tmp"), clean=True)
    topic = unique("env/tmp/")
    assert_ok(temporary.command({"Command": "RegSub", "Topic": topic}))
    watcher = clients(broker.port)
    assert len(watcher.list_subs(QName=temporary.client_id, Topic=topic)) == 1
    temporary.disconnect()
    assert wait_until(
        lambda: watcher.list_subs(QName=temporary.client_id, Topic=topic) == [], 10
    ), "the subscription of a temporary dynamic queue is removed when it disconnects"


def test_regsub_expiry_removes_the_subscription(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    queue = unique("ex")
    topic = unique("env/ex/")
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue}, form=form, mqmd={"Expiry": "5"}
    )
    assert_ok(reply)
    assert wait_until(lambda: client.list_subs(QName=queue) == [], 10), (
        "a subscription registered with Expiry 5 (0.5 s) is still there after 10 s"
    )


def test_regsub_expiry_minus_one_is_unlimited(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """MQ's MQEI_UNLIMITED (-1): the subscription does not expire."""
    client = clients(broker.port)
    queue = unique("ex")
    topic = unique("env/unlimited/")
    reply = client.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "FullResp"},
        form=form,
        mqmd={"Expiry": "-1"},
    )
    assert_ok(reply)
    assert reply.prop("Expiry") == [], str(reply)  # no expiry time
    assert len(client.list_subs(QName=queue)) == 1


# -- malformed commands ---------------------------------------------------------------------

MALFORMED: dict[str, bytes] = {
    "unclosed psc folder": b"<psc><Command>RegSub</Command><Topic>a</Topic>",
    "unbalanced tags": b"<psc><Command>RegSub</Command><Topic>a</Tpic></psc>",
    "unbalanced angle brackets": b"<psc><Command>RegSub</Command><Topic>a</Topic</psc>",
    "unknown command": b"<psc><Command>Frobnicate</Command><Topic>a</Topic></psc>",
    "missing Command": b"<psc><Topic>a</Topic></psc>",
    "unknown property": b"<psc><Command>RegSub</Command><Topic>a</Topic><Hue>1</Hue></psc>",
    "repeated QName": (
        b"<psc><Command>RegSub</Command><Topic>a</Topic><QName>x</QName><QName>y</QName></psc>"
    ),
    "nested property": b"<psc><Command>RegSub</Command><Topic><a>b</a></Topic></psc>",
    "doctype": (
        b'<psc><!DOCTYPE psc [<!ENTITY e "RegSub">]><Command>&e;</Command><Topic>a</Topic></psc>'
    ),
    "no psc folder": b"hello, broker",
    "empty message": b"",
    "mqmd twice": (
        b"<mqmd><CorrelId>01</CorrelId></mqmd><mqmd><CorrelId>02</CorrelId></mqmd>"
        b"<psc><Command>RegSub</Command><Topic>a</Topic></psc>"
    ),
    "unknown mqmd field": (
        b"<mqmd><Colour>red</Colour></mqmd><psc><Command>RegSub</Command><Topic>a</Topic></psc>"
    ),
    "CorrelId not hex": (
        b"<mqmd><CorrelId>XYZ</CorrelId></mqmd><psc><Command>RegSub</Command><Topic>a</Topic></psc>"
    ),
    "bad MsgType": (
        b"<mqmd><MsgType>shout</MsgType></mqmd><psc><Command>RegSub</Command><Topic>a</Topic></psc>"
    ),
    "Expiry not a number": (
        b"<mqmd><Expiry>soon</Expiry></mqmd><psc><Command>RegSub</Command><Topic>a</Topic></psc>"
    ),
    "Expiry zero": (
        b"<mqmd><Expiry>0</Expiry></mqmd><psc><Command>RegSub</Command><Topic>a</Topic></psc>"
    ),
    "Expiry negative": (
        b"<mqmd><Expiry>-5</Expiry></mqmd><psc><Command>RegSub</Command><Topic>a</Topic></psc>"
    ),
    "invalid UTF-8": b"<psc><Command>RegSub</Command><Topic>\xff\xfe</Topic></psc>",
    "json unpaired surrogate": (
        b'{"psc": {"Command": "RegSub", "Topic": ["a"], "SubName": "\\udcff"}}'
    ),
    "json truncated": b'{"psc": {"Command": "RegSub", "Topic": ["a"]',
    "json psc not an object": b'{"psc": "RegSub"}',
    "json no psc": b'{"mqmd": {"CorrelId": "01"}}',
    "json unknown key": b'{"psc": {"Command": "RegSub", "Topic": ["a"]}, "extra": 1}',
    "json value is an object": b'{"psc": {"Command": "RegSub", "Topic": [{"a": 1}]}}',
    "json mqmd not an object": b'{"mqmd": [1], "psc": {"Command": "RegSub", "Topic": ["a"]}}',
    "json unknown command": b'{"psc": {"Command": "Frobnicate", "Topic": ["a"]}}',
    "json missing Command": b'{"psc": {"Topic": ["a"]}}',
    "json bad bodyBase64": (
        b'{"psc": {"Command": "Publish", "Topic": ["a"]}, "bodyBase64": "%%%"}'
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_command_is_3097_and_the_client_carries_on(
    broker: BrokerProcess, clients: ClientFactory, case: str
) -> None:
    client = clients(broker.port)
    payload = MALFORMED[case]
    topic = DEFAULT_STREAM if b"Publish" in payload else CONTROL_QUEUE
    reply = client.send_raw(payload, topic)
    assert_error(reply, 3097)
    assert reply.topic == RESPONSE_PREFIX + client.client_id
    expected_form = "json" if payload.lstrip().startswith(b"{") else "xml"
    assert reply.form == expected_form, str(reply)
    assert "".join(reply.prop("Detail")).strip(), f"no detail saying where: {reply}"
    # The same connection still works, for commands and for plain MQTT.
    assert client.disconnects == 0
    topic = unique("env/after/")
    assert_ok(client.command({"Command": "RegSub", "Topic": topic}))
    client.publish(topic, b"still alive", qos=1)
    assert [m.payload for m in client.wait_deliveries(1, topic)] == [b"still alive"]


def test_unknown_command_names_the_command(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    client = clients(broker.port)
    reply = client.command({"Command": "RegPub", "Topic": "a"}, form=form)
    response = assert_error(reply, 3097)
    assert response.get("Command") == "RegPub"


def test_broker_unharmed_by_a_burst_of_malformed_commands(
    broker: BrokerProcess, clients: ClientFactory
) -> None:
    bystander = clients(broker.port, unique("by"), clean=False)
    watched = unique("env/bystander/")
    bystander.subscribe(watched, 1)
    attacker = clients(broker.port)
    for qos in (0, 1, 2):
        for payload in MALFORMED.values():
            attacker.publish(CONTROL_QUEUE, payload, qos=qos)
            attacker.publish(DEFAULT_STREAM, payload, qos=qos)
    attacker.publish(CONTROL_QUEUE, uuid.uuid4().bytes * 4096, qos=1)
    expected = 3 * 2 * len(MALFORMED) + 1
    assert wait_until(lambda: len(attacker.replies()) >= expected, 20)
    assert {r.completion for r in attacker.replies()} == {"error"}
    assert {tuple(r.reasons) for r in attacker.replies()} == {(3097,)}
    assert broker.running
    assert attacker.disconnects == 0 and bystander.disconnects == 0
    # Everyone else carries on: plain MQTT and commands.
    publisher = clients(broker.port)
    publisher.publish(watched, b"fine", qos=1)
    assert [m.payload for m in bystander.wait_deliveries(1, watched)] == [b"fine"]
    topic = unique("env/after/")
    assert_ok(
        publisher.command({"Command": "RegSub", "Topic": topic, "QName": bystander.client_id})
    )
    publisher.publish(topic, b"also fine", qos=1)
    assert [m.payload for m in bystander.wait_deliveries(1, topic)] == [b"also fine"]


def test_command_messages_are_not_journaled(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """Design §6: commands are consumed, never journaled as publications (their replies are
    not publications either). The journal's last seq is read from $SYS."""
    watcher = clients(broker.port)
    watcher.subscribe("$SYS/broker/journal/last_seq", 0)

    def values() -> list[int]:
        return [
            int(m.payload)
            for m in watcher.messages
            if m.topic == "$SYS/broker/journal/last_seq" and not m.retain
        ]

    # A fresh $SYS update: everything published before this test is counted in it.
    assert wait_until(lambda: len(values()) >= 1, 10), "no $SYS update"
    before = values()[-1]
    client = clients(broker.port)
    queue = unique("jq")
    topic = unique("env/journal/")
    for psc in (
        {"Command": "RegSub", "Topic": topic, "QName": queue},
        {"Command": "ReqUpdate", "Topic": topic, "QName": queue},
        {"Command": "DeletePub", "Topic": topic},
        {"Command": "DeregSub", "Topic": topic, "QName": queue},
        {"Command": "Frobnicate"},
    ):
        client.command(psc, form=form)
    client.publish(topic, b"the only publication", qos=1)
    assert wait_until(lambda: values()[-1] != before, 10), "the journal did not move"
    assert values()[-1] == before + 1, f"journal seq went from {before} to {values()[-1]}"
