"""telemq's Put command (docs/mq.md "Put"): one message on one queue only, at the command's QoS.

Put goes to SYSTEM.BROKER.CONTROL.QUEUE in the XML or JSON form; the message reaches the
queue's session (online at once, offline when it reconnects), is not routed to subscribers of
its topic, not retained; unknown queue 3076, a full queue or QoS 0 for an offline queue 3094,
no publish permission (or another's queue without subscribe permission, or another user's
queue without a `queue` grant) 3081.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from telemq.cli.main import main
from telemq.client import MqttClient, QueuePutter

from .conftest import ClientFactory, start_broker
from .helpers import (
    DEFAULT_STREAM,
    BrokerProcess,
    MQClient,
    PscValue,
    assert_error,
    assert_ok,
    build_command,
    unique,
    users_and_acl,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

BIG_PACKETS = 4 * 1024 * 1024  # the broker's packet limit here: above the command limit


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = f'name = "QM.PUT"\n[sys]\ninterval = 0\n[limits]\nmax_packet_size = {BIG_PACKETS}\n'
    process = start_broker(tmp_path_factory, config)
    yield process
    process.finalize()


def _put(queue: str, topic: PscValue, **extra: str) -> dict[str, PscValue]:
    return {"Command": "Put", "QName": queue, "Topic": topic, **extra}


def _body(form: str, qos: int) -> bytes:
    """A body with bytes the XML form must carry verbatim (JSON: text only)."""
    if form == "xml":
        return b"<not a folder> \x00\xff qos " + str(qos).encode()
    return f'{{"qos": {qos}, "text": "é"}}'.encode()


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_put_reaches_an_online_queue_only(
    broker: BrokerProcess, clients: ClientFactory, form: str, qos: int
) -> None:
    queue = unique("q")
    receiver = clients(broker.port, queue, clean=False)
    topic = unique("put/online/")
    watcher = clients(broker.port)
    watcher.subscribe(topic, 2)
    sender = clients(broker.port)
    body = _body(form, qos)
    assert_ok(sender.command(_put(queue, topic), form=form, body=body, qos=qos))
    got = receiver.wait_deliveries(1, topic)
    assert [(m.topic, m.payload, m.qos, m.retain) for m in got] == [(topic, body, qos, False)]
    watcher.sync()
    assert watcher.deliveries(topic) == [], "a Put is not routed to the topic's subscribers"
    receiver.sync()
    assert len(receiver.deliveries(topic)) == 1, "exactly one copy"
    late = clients(broker.port)
    late.subscribe(topic, 1)
    late.sync()
    assert late.deliveries(topic) == [], "a Put is never retained"


@pytest.mark.parametrize("qos", [1, 2])
def test_put_waits_in_an_offline_persistent_queue(
    broker: BrokerProcess, clients: ClientFactory, form: str, qos: int
) -> None:
    queue = unique("q")
    first = clients(broker.port, queue, clean=False)
    first.disconnect()
    topic = unique("put/offline/")
    sender = clients(broker.port)
    bodies = [_body(form, qos) + str(i).encode() for i in range(3)]
    for body in bodies:
        assert_ok(sender.command(_put(queue, topic), form=form, body=body, qos=qos))
    receiver = clients(broker.port, queue, clean=False, connect=False)
    assert receiver.connect() is True, "the session was kept"
    got = receiver.wait_deliveries(3, topic)
    assert [(m.payload, m.qos) for m in got] == [(b, qos) for b in bodies], "in order, at QoS"


def test_put_at_qos0_to_an_offline_queue_is_refused(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    queue = unique("q")
    clients(broker.port, queue, clean=False).disconnect()
    topic = unique("put/offline0/")
    sender = clients(broker.port)
    reply = sender.command(_put(queue, topic), form=form, body=b"lost", qos=0)
    response = assert_error(reply, 3094)
    assert response.get("QName") == queue
    assert "QoS 0" in reply.prop("Detail")[0]
    receiver = clients(broker.port, queue, clean=False)
    receiver.sync()
    assert receiver.deliveries(topic) == []


def test_put_to_a_queue_made_by_regsub_from_the_subs_command(
    broker: BrokerProcess, clients: ClientFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """`telemq subs` (the blocking client) registers a queue that has no session yet: a Put
    waits there for its client."""
    queue = unique("q")
    topic = unique("put/regsub/")
    port = str(broker.port)
    assert main(["subs", "register", "-p", port, "--queue", queue, "--topic", topic]) == 0
    assert main(["subs", "list", "-p", port, "--queue", queue]) == 0
    assert f"QName: {queue}" in capsys.readouterr().out
    sender = clients(broker.port)
    assert_ok(sender.command(_put(queue, topic), body=b"backfilled", qos=1))
    receiver = clients(broker.port, queue, clean=False)
    assert [m.payload for m in receiver.wait_deliveries(1, topic)] == [b"backfilled"]


def test_put_to_an_unknown_queue_is_3076(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    sender = clients(broker.port)
    queue = unique("nobody")
    response = assert_error(sender.command(_put(queue, "put/x"), form=form, body=b"x"), 3076)
    assert response.get("QName") == queue


def test_put_checks_its_properties(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    sender = clients(broker.port)
    queue = sender.client_id
    assert_error(sender.command({"Command": "Put", "QName": queue}, form=form), 3072)
    assert_error(sender.command(_put(queue, "put/+/x"), form=form), 3072)
    assert_error(sender.command(_put(queue, ["put/a", "put/b"]), form=form), 3072)
    assert_error(sender.command(_put(queue, "put/a", QMgrName="QM.OTHER"), form=form), 3074)
    assert_error(sender.command(_put(queue, "put/a"), form=form, topic=DEFAULT_STREAM), 3079)
    # QName defaults to the requester's own queue.
    topic = unique("put/self/")
    assert_ok(sender.command({"Command": "Put", "Topic": topic}, form=form, body=b"me"))
    assert [m.payload for m in sender.wait_deliveries(1, topic)] == [b"me"]


def test_an_over_long_put_is_3097_and_the_connection_stays(
    broker: BrokerProcess, clients: ClientFactory
) -> None:
    queue = unique("q")
    receiver = clients(broker.port, queue, clean=False)
    sender = clients(broker.port)
    topic = unique("put/big/")
    correl = "0B16"
    payload = build_command("xml", _put(queue, topic), {"CorrelId": correl}, b"x" * 1024 * 1024)
    reply = sender.send_raw(payload, correl_id=correl)  # the <mqmd> is still read
    assert_error(reply, 3097)
    assert "exceeds the limit" in reply.prop("Detail")[0]
    assert_ok(sender.command(_put(queue, topic), body=b"small"))
    assert [m.payload for m in receiver.wait_deliveries(1, topic)] == [b"small"]


# -- authorization and a full queue: a broker with users, rules and a small queue limit -------

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
ACL = [
    ("*", "command", "#", True),
    ("alice", "queue", "#", True),  # alice may use other users' queues; carol may not
    ("*", "subscribe", "SYSTEM.BROKER.RESPONSE/%c", True),
    ("*", "all", "sentinel/#", True),
    ("*", "publish", "open/#", True),
    ("*", "publish", "pubonly/#", True),
    ("*", "subscribe", "open/#", True),
]
QUEUE_LIMIT = 3


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    lines = [
        'name = "QM.PUTAUTH"',
        "allow_anonymous = false",
        "[sys]",
        "interval = 0",
        "[limits]",
        f"max_queued_messages = {QUEUE_LIMIT}",
    ]
    config = "\n".join(lines) + "\n" + users_and_acl(PASSWORDS, ACL)
    process = start_broker(tmp_path_factory, config)
    yield process
    process.finalize()


def _as(clients: ClientFactory, broker: BrokerProcess, user: str, **kwargs: object) -> MQClient:
    return clients(broker.port, username=user, password=PASSWORDS[user], **kwargs)


def test_put_needs_publish_and_subscribe_or_ownership_and_the_queue(
    secured: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    bob_queue = unique("bobq")
    bob = _as(clients, secured, "bob", client_id=bob_queue, clean=False)
    alice = _as(clients, secured, "alice")
    # No publish permission on the topic: refused, whoever's queue it is.
    response = assert_error(
        alice.command(_put(bob_queue, unique("closed/")), form=form, body=b"x"), 3081
    )
    assert response.get("Topic", "").startswith("closed/")
    assert_error(
        alice.command(_put(alice.client_id, unique("closed/")), form=form, body=b"x"), 3081
    )
    # May publish but not subscribe: only to one's own queue.
    topic = unique("pubonly/")
    response = assert_error(alice.command(_put(bob_queue, topic), form=form, body=b"x"), 3081)
    assert response.get("QName") == bob_queue
    assert_ok(alice.command(_put(alice.client_id, topic), form=form, body=b"mine"))
    assert [m.payload for m in alice.wait_deliveries(1, topic)] == [b"mine"]
    # May publish and subscribe, and use other users' queues: to anyone's queue.
    topic = unique("open/")
    assert_ok(alice.command(_put(bob_queue, topic), form=form, body=b"for bob"))
    # Without the queue grant, another user's queue is out of reach whatever the topic.
    carol = _as(clients, secured, "carol")
    reply = carol.command(_put(bob_queue, topic), form=form, body=b"from carol")
    assert assert_error(reply, 3081).get("QName") == bob_queue
    assert [m.payload for m in bob.wait_deliveries(1, topic)] == [b"for bob"]
    bob.sync()
    assert bob.deliveries("pubonly/") == [] and bob.deliveries("closed/") == []


def test_put_to_a_full_queue_is_3094(secured: BrokerProcess, clients: ClientFactory) -> None:
    queue = unique("fullq")
    _as(clients, secured, "bob", client_id=queue, clean=False).disconnect()
    alice = _as(clients, secured, "alice")
    topic = unique("open/full/")
    for i in range(QUEUE_LIMIT):
        assert_ok(alice.command(_put(queue, topic), body=str(i).encode()))
    reply = alice.command(_put(queue, topic), body=b"one too many")
    response = assert_error(reply, 3094)
    assert response.get("QName") == queue and "full" in reply.prop("Detail")[0]
    bob = _as(clients, secured, "bob", client_id=queue, clean=False)
    got = bob.wait_deliveries(QUEUE_LIMIT, topic)
    bob.sync()
    assert [m.payload for m in bob.deliveries(topic)] == [b"0", b"1", b"2"]
    assert len(got) == QUEUE_LIMIT


def test_the_blocking_client_puts_any_body_verbatim(
    broker: BrokerProcess, clients: ClientFactory
) -> None:
    """`telemq.client.QueuePutter` (the sink's): bodies that look like folders or are not
    text arrive byte for byte, each Put answered."""
    queue = unique("q")
    receiver = clients(broker.port, queue, clean=False)
    topic = unique("put/client/")
    bodies = [b"<usr>not a folder</usr>", b"  <mcd>x", b"<psc>y</psc>", bytes(range(256)), b""]
    with MqttClient("127.0.0.1", broker.port, timeout=10.0) as client:
        putter = QueuePutter(client, queue, window=2)
        for body in bodies:
            putter.put(topic, body, qos=1)
        putter.flush()
        assert (putter.completed, putter.delivered, putter.refused) == (len(bodies), 5, 0)
    assert [m.payload for m in receiver.wait_deliveries(len(bodies), topic)] == bodies
