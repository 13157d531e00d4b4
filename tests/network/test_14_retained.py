"""Retained publications across a network: a later subscriber anywhere gets what was
retained anywhere, once, with RETAIN set; MQ DeletePub deletes everywhere, or with DelOpt
Local only where it is made (docs/network.md §5-6, broker/retained_sync.py)."""

from __future__ import annotations

from pathlib import Path

from mq.helpers import assert_ok, connected
from testsupport.paho import PahoClient
from testsupport.process import unique

from .netsupport import Network, sync_sentinels, wait_link_state, without_sentinels
from .test_11_forwarding import wait_proxies


def subscriber(port: int, topic_filter: str) -> PahoClient:
    client = PahoClient(port)
    client.connect()
    client.subscribe(topic_filter, qos=1)
    return client


def retained_values(client: PahoClient) -> list[tuple[str, bytes, bool]]:
    """What `client` received (topic, payload, RETAIN), the sentinels left out."""
    return [(m.topic, m.payload, m.retain) for m in without_sentinels(client.received())]


def test_a_later_subscriber_gets_what_was_retained_at_the_far_end(chain: Network) -> None:
    base = unique("ret")
    publisher = PahoClient(chain.ports["A"])
    publisher.connect()
    # QoS 0 first: the PUBACK of the QoS 1 publication after it says A has handled both (a
    # connection's packets are handled in order). The other way round, the QoS 0 one could
    # still be on its way when C's subscription reaches A, and arrive live (RETAIN 0).
    publisher.publish(f"{base}/q0", "zero", qos=0, retain=True)
    publisher.publish(f"{base}/a", "v1", qos=1, retain=True)
    at_c = subscriber(chain.ports["C"], f"{base}/#")
    at_c.wait_messages(2)
    # A second answer, from A or from B, would come before the sentinels of A and B.
    sync_sentinels(chain, "ABC", f"{base}/sentinel", [at_c])
    assert sorted(retained_values(at_c)) == [
        (f"{base}/a", b"v1", True),
        (f"{base}/q0", b"zero", True),
    ]
    # B kept the answer on its way: its own new subscriber gets it from there, once.
    at_b = subscriber(chain.ports["B"], f"{base}/a")
    at_b.wait_messages(1)
    # An update reaches both live; a later subscriber at C gets the new value only.
    publisher.publish(f"{base}/a", "v2", qos=1, retain=True)
    at_c.wait_messages(3)
    at_b.wait_messages(2)
    late = subscriber(chain.ports["C"], f"{base}/a")
    late.wait_messages(1)
    # Sentinels on the topic itself (not retained: the retained value stays v2).
    sync_sentinels(chain, "ABC", f"{base}/a", [late, at_b, at_c])
    assert retained_values(at_b) == [(f"{base}/a", b"v1", True), (f"{base}/a", b"v2", False)]
    assert retained_values(late) == [(f"{base}/a", b"v2", True)]
    assert len(without_sentinels(at_c.received())) == 3
    for client in (publisher, at_c, at_b, late):
        client.close()


def test_retained_messages_from_both_ends_meet_in_the_middle(chain: Network) -> None:
    """Answers go both ways and never back to where a message was made."""
    base = unique("both")
    for broker in ("A", "C"):
        publisher = PahoClient(chain.ports[broker])
        publisher.connect()
        publisher.publish(f"{base}/{broker}", f"from {broker}", qos=1, retain=True)
        publisher.close()
    at_a = subscriber(chain.ports["A"], f"{base}/#")
    at_c = subscriber(chain.ports["C"], f"{base}/#")
    at_a.wait_messages(2)
    at_c.wait_messages(2)
    sync_sentinels(chain, "ABC", f"{base}/sentinel", [at_a, at_c])
    expected = [(f"{base}/A", b"from A", True), (f"{base}/C", b"from C", True)]
    assert sorted(retained_values(at_a)) == expected
    assert sorted(retained_values(at_c)) == expected
    for client in (at_a, at_c):
        client.close()


def test_deletepub_deletes_everywhere_unless_local(chain: Network) -> None:
    base = unique("del")
    publisher = PahoClient(chain.ports["A"])
    publisher.connect()
    publisher.publish(f"{base}/all", "x", qos=1, retain=True)
    publisher.publish(f"{base}/here", "y", qos=1, retain=True)
    # Subscribers at B and C keep the proxies, so both hold the two retained messages.
    watchers = {broker: subscriber(chain.ports[broker], f"{base}/#") for broker in ("B", "C")}
    for watcher in watchers.values():
        watcher.wait_messages(2)
    admin = connected(chain.ports["A"])
    assert_ok(admin.command({"Command": "DeletePub", "Topic": f"{base}/all"}))
    at_c = connected(chain.ports["C"])
    assert_ok(at_c.command({"Command": "DeletePub", "Topic": f"{base}/here", "DelOpt": "Local"}))
    # Whatever A published after its DeletePub arrives after the deletion, on every broker.
    publisher.publish(f"{base}/marker", "m", qos=1)
    for watcher in watchers.values():
        watcher.wait_messages(3)
    late = {broker: subscriber(chain.ports[broker], f"{base}/#") for broker in ("A", "B", "C")}
    sync_sentinels(chain, "ABC", f"{base}/sentinel", list(late.values()))
    assert retained_values(late["A"]) == [(f"{base}/here", b"y", True)]
    assert retained_values(late["B"]) == [(f"{base}/here", b"y", True)]
    assert retained_values(late["C"]) == []
    for client in (publisher, *watchers.values(), *late.values()):
        client.close()
    admin.close()
    at_c.close()


def test_a_deletepub_crosses_a_link_that_was_down(chain: Network) -> None:
    """The delete-retained message waits, stored, in the link's queue."""
    base = unique("down")
    publisher = PahoClient(chain.ports["A"])
    publisher.connect()
    publisher.publish(f"{base}/t", "x", qos=1, retain=True)
    watcher = subscriber(chain.ports["C"], f"{base}/#")
    watcher.wait_messages(1)
    chain.brokers["C"].stop()
    admin = connected(chain.ports["A"])
    assert_ok(admin.command({"Command": "DeletePub", "Topic": f"{base}/t"}))
    publisher.publish(f"{base}/marker", "m", qos=1)
    admin.close()
    chain.brokers["C"].start()
    assert wait_link_state(chain, "C", "B", "connected")
    late = subscriber(chain.ports["C"], f"{base}/#")
    sync_sentinels(chain, "ABC", f"{base}/sentinel", [late])
    assert [m.topic for m in without_sentinels(late.received())] == []
    publisher.close()
    late.close()


def test_retained_messages_cross_a_star(tmp_path: Path) -> None:
    leaves = ["L1", "L2", "L3"]
    network = Network(tmp_path, ["H", *leaves], [(leaf, "H") for leaf in leaves])
    clients: list[PahoClient] = []
    try:
        network.start()
        for leaf in leaves:
            assert wait_link_state(network, leaf, "H", "connected"), leaf
        base = unique("star")
        for broker in ("L1", "L2", "H"):
            publisher = PahoClient(network.ports[broker])
            publisher.connect()
            publisher.publish(f"{base}/{broker}", broker, qos=1, retain=True)
            publisher.close()
        at_l3 = subscriber(network.ports["L3"], f"{base}/#")
        clients.append(at_l3)
        wait_proxies(network, "H", "L3", 1)
        at_l3.wait_messages(3)
        sync_sentinels(network, ["H", *leaves], f"{base}/sentinel", [at_l3])
        assert sorted(retained_values(at_l3)) == [
            (f"{base}/H", b"H", True),
            (f"{base}/L1", b"L1", True),
            (f"{base}/L2", b"L2", True),
        ]
        at_l1 = subscriber(network.ports["L1"], f"{base}/#")
        clients.append(at_l1)
        at_l1.wait_messages(3)
        sync_sentinels(network, ["H", *leaves], f"{base}/sentinel", [at_l1])
        assert len(without_sentinels(at_l1.received())) == 3
    finally:
        for client in clients:
            client.close()
        network.finalize()
