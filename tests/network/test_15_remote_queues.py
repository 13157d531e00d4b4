"""Queues on other brokers across a chain A - B - C: a RegSub at A whose `QMgrName` is C puts
its publications on queue `QName` at C, durably, across B (docs/network.md §7; the seed's
Register Subscriber page: "QMgrName: the queue manager of the subscriber queue")."""

from __future__ import annotations

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mq.helpers import MQClient, assert_error, assert_ok, connected
from testsupport.paho import MQTT5, MQTT311, PahoClient, sys_value
from testsupport.process import unique, wait_until

from .netsupport import Network, wait_link_state
from .test_11_forwarding import wait_proxies

WAIT = 20.0
REMOTE_QUEUED = "$SYS/broker/remote queues/queued"


def regsub_at_c(registrar: MQClient, topic: str, queue: str, **psc: str) -> None:
    assert_ok(
        registrar.command(
            {"Command": "RegSub", "Topic": topic, "QMgrName": "C", "QName": queue, **psc}
        )
    )


def queue_at_c(chain: Network, prefix: str, version: int = MQTT311) -> tuple[str, str, PahoClient]:
    """A topic base, a queue name, and the queue's own client connected at C."""
    base, queue = unique(prefix), unique("Q")
    owner = PahoClient(chain.ports["C"], queue, version=version)
    owner.connect()
    return base, queue, owner


def payloads(client: PahoClient, prefix: str) -> list[bytes]:
    return [m.payload for m in client.messages if m.topic.startswith(prefix)]


def wait_payloads(client: PahoClient, prefix: str, expected: list[bytes]) -> list[bytes]:
    """Wait until `client` holds exactly `expected` (in any order) under `prefix`, and
    return what it holds; fail if it does not within `WAIT` (a copy missing, or one too
    many: a duplicate makes the multiset differ for good)."""
    arrived = wait_until(lambda: sorted(payloads(client, prefix)) == sorted(expected), WAIT)
    held = payloads(client, prefix)
    assert arrived, f"{client.client_id} holds {sorted(held)}, expected {sorted(expected)}"
    return held


def test_publications_from_every_broker_reach_the_queue_at_c_once(chain: Network) -> None:
    base, queue, owner = queue_at_c(chain, "rq")
    registrar = connected(chain.ports["A"])
    regsub_at_c(registrar, f"{base}/#", queue)
    # At B and C: the registrar's reply and sentinel subscriptions and the remote one.
    wait_proxies(chain, "B", "A", 3)
    wait_proxies(chain, "C", "B", 3)
    publishers = {name: PahoClient(chain.ports[name]) for name in ("A", "B", "C")}
    expected = []
    for name, publisher in publishers.items():
        publisher.connect()
        for qos in (0, 1, 2):
            payload = f"{name} q{qos}".encode()
            publisher.publish(f"{base}/{name}", payload, qos=qos)
            expected.append(payload)
    got = wait_payloads(owner, base, expected)
    assert sorted(got) == sorted(expected)
    # Nothing more comes: a last message from each broker arrives alone after the others.
    # Each end sentinel follows its broker's three publications from the same publisher
    # session, over the same links (A - B - C) into the same queue at C, and every hop
    # forwards in order, so a duplicate of any of them would arrive before its sentinel;
    # once the sentinels are in, the queue holds exactly one copy of each.
    for name, publisher in publishers.items():
        publisher.publish(f"{base}/end", f"end {name}".encode(), qos=1)
    ended = wait_payloads(owner, base, [*expected, b"end A", b"end B", b"end C"])
    assert sorted(ended) == sorted([*expected, b"end A", b"end B", b"end C"])
    # ListSubs at A says where the queue lives; the registrar's own queue is A's.
    listed = registrar.list_subs(QName=queue)  # QName names the queue, not where it waits
    assert [(s["QMgrName"], s["QName"], s["Topic"]) for s in listed] == [
        (["C"], [queue], [f"{base}/#"])
    ]

    # What each side of a link forwarded is what the other received ($SYS, per link).
    def counts() -> tuple[str | None, ...]:
        def value(broker: str, link: str, what: str) -> str | None:
            return sys_value(chain.ports[broker], f"$SYS/broker/links/{link}/{what}", 1.0)

        return (
            value("A", "B", "messages/sent"),
            value("B", "A", "messages/received"),
            value("B", "C", "messages/sent"),
            value("C", "B", "messages/received"),
            value("A", "B", "messages/dropped"),
        )

    assert wait_until(
        lambda: (c := counts())[0] == c[1] and c[2] == c[3] and int(c[2] or 0) >= 12, WAIT
    ), counts()
    assert counts()[4] == "0"
    for client in (owner, registrar, *publishers.values()):
        client.close()


def test_the_queue_is_made_at_c_and_keeps_what_came_while_nobody_read_it(
    chain: Network,
) -> None:
    base = unique("rq-made")
    queue = unique("Q")
    registrar = connected(chain.ports["A"])
    regsub_at_c(registrar, f"{base}/#", queue)
    wait_proxies(chain, "C", "B", 3)
    publisher = PahoClient(chain.ports["B"])
    publisher.connect()
    sent = [f"m{i}".encode() for i in range(5)]
    for payload in sent:
        publisher.publish(f"{base}/t", payload, qos=1)

    # The queue's client comes now and then, resumes the session the copies made, and
    # gets them in order (QoS 1: one it had not acknowledged when it left comes again).
    reader = PahoClient(chain.ports["C"], queue, clean=False)

    def drained() -> bool:
        reader.connect()
        wait_until(lambda: set(payloads(reader, base)) == set(sent), 0.5)
        reader.close()
        return set(payloads(reader, base)) == set(sent)

    assert wait_until(drained, WAIT, 0.5), payloads(reader, base)
    assert list(dict.fromkeys(payloads(reader, base))) == sent
    registrar.close()
    publisher.close()


def test_an_unknown_broker_is_still_3074_and_network_names_are_not_queues(
    chain: Network,
) -> None:
    registrar = connected(chain.ports["A"])
    reply = registrar.command({"Command": "RegSub", "Topic": "x/#", "QMgrName": "Z", "QName": "q"})
    assert assert_error(reply, 3074)["QMgrName"] == "Z"
    for queue in ("$link/B", "$remote/C/q", "$bridge/b"):
        reply = registrar.command({"Command": "RegSub", "Topic": "x/#", "QName": queue})
        assert_error(reply, 3076)
    registrar.close()


def test_deregsub_stops_the_copies(chain: Network) -> None:
    base, queue, owner = queue_at_c(chain, "rq-dereg")
    registrar = connected(chain.ports["A"])
    regsub_at_c(registrar, f"{base}/a/#", queue)
    regsub_at_c(registrar, f"{base}/b/#", queue)
    wait_proxies(chain, "C", "B", 4)
    publisher = PahoClient(chain.ports["A"])
    publisher.connect()
    publisher.publish(f"{base}/a/1", b"a1", qos=1)
    wait_payloads(owner, base, [b"a1"])
    assert_ok(
        registrar.command(
            {"Command": "DeregSub", "Topic": f"{base}/a/#", "QMgrName": "C", "QName": queue}
        )
    )
    publisher.publish(f"{base}/a/2", b"a2", qos=1)
    publisher.publish(f"{base}/b/1", b"b1", qos=1)  # after a2, on the same way
    assert wait_payloads(owner, base, [b"a1", b"b1"]) == [b"a1", b"b1"]
    for client in (owner, registrar, publisher):
        client.close()


def test_a_correlasid_registration_delivers_its_correlid_at_c(chain: Network) -> None:
    base, queue, owner = queue_at_c(chain, "rq-correl", version=MQTT5)
    registrar = connected(chain.ports["A"])
    correl = "0A0B0C0D0E0F"
    reply = registrar.command(
        {
            "Command": "RegSub",
            "Topic": f"{base}/#",
            "QMgrName": "C",
            "QName": queue,
            "RegOpt": "CorrelAsId",
        },
        mqmd={"CorrelId": correl},
    )
    assert_ok(reply)
    wait_proxies(chain, "C", "B", 3)
    publisher = PahoClient(chain.ports["B"], version=MQTT5)
    publisher.connect()
    properties = Properties(PacketTypes.PUBLISH)
    properties.CorrelationData = b"the publisher's"
    properties.UserProperty = [("k", "v")]
    publisher.publish(f"{base}/t", b"x", qos=1, properties=properties)
    wait_payloads(owner, base, [b"x"])
    delivered = next(m for m in owner.messages if m.topic.startswith(base))
    assert delivered.properties.CorrelationData == bytes.fromhex(correl)
    assert delivered.properties.UserProperty == [("k", "v")]
    for client in (owner, registrar, publisher):
        client.close()


def test_copies_wait_while_c_is_down_and_arrive_when_it_returns(chain: Network) -> None:
    base = unique("rq-down")
    queue = unique("Q")
    reader = PahoClient(chain.ports["C"], queue, clean=False)
    reader.connect()
    reader.close()
    registrar = connected(chain.ports["A"])
    regsub_at_c(registrar, f"{base}/#", queue)
    wait_proxies(chain, "C", "B", 3)
    chain.brokers["C"].kill()
    assert wait_link_state(chain, "B", "C", "down")
    publisher = PahoClient(chain.ports["A"])
    publisher.connect()
    sent = [f"m{i}".encode() for i in range(10)]
    for index, payload in enumerate(sent):
        publisher.publish(f"{base}/t", payload, qos=1 + index % 2)

    def waiting() -> int:  # in the stand-ins of A and B, as $SYS counts them
        values = [sys_value(chain.ports[name], REMOTE_QUEUED, 1.0) for name in ("A", "B")]
        return sum(int(value or 0) for value in values)

    assert wait_until(lambda: waiting() == len(sent), WAIT), waiting()
    chain.brokers["C"].start()
    assert wait_link_state(chain, "C", "B", "connected")
    reader.connect()
    assert sorted(wait_payloads(reader, base, sent)) == sorted(sent)
    for client in (reader, registrar, publisher):
        client.close()


def test_retained_publications_and_requpdate_reach_the_queue_at_c(chain: Network) -> None:
    base, queue, owner = queue_at_c(chain, "rq-retained")
    publisher = PahoClient(chain.ports["A"])
    publisher.connect()
    publisher.publish(f"{base}/t", b"kept", qos=1, retain=True)
    registrar = connected(chain.ports["A"])
    # Answered with A's retained publication, marked retained (InformIfRet) at C.
    regsub_at_c(registrar, f"{base}/#", queue, RegOpt="InformIfRet")
    wait_payloads(owner, base, [b"kept"])
    assert_ok(
        registrar.command(
            {"Command": "ReqUpdate", "Topic": f"{base}/#", "QMgrName": "C", "QName": queue}
        )
    )
    wait_payloads(owner, base, [b"kept", b"kept"])
    assert [m.retain for m in owner.messages if m.topic.startswith(base)] == [True, True]
    for client in (owner, registrar, publisher):
        client.close()


def test_remote_client_ids_are_the_networks(chain: Network) -> None:
    client = PahoClient(chain.ports["C"], "$remote/C/q")
    client.client.connect("127.0.0.1", chain.ports["C"])
    client.client.loop_start()
    try:
        assert wait_until(lambda: bool(client.connacks), 5.0)
        assert client.connacks[-1][1] in (2, 0x85)  # identifier rejected (as paho names it)
    finally:
        client.client.loop_stop()
