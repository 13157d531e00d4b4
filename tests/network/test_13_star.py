"""A star: a hub H and three leaves that dial it. Subscriptions at any leaf hear what is
published at every other broker, through the hub, once; the hub asks each leaf only for
what the other leaves and its own clients need (docs/network.md §5-6)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mq.helpers import assert_ok, connected
from testsupport.paho import PahoClient
from testsupport.process import unique

from .netsupport import Network, sync_sentinels, wait_link_state, without_sentinels
from .test_11_forwarding import proxies_in, wait_proxies

LEAVES = ["L1", "L2", "L3"]


@pytest.fixture
def star(tmp_path: Path) -> Iterator[Network]:
    """The hub H and three leaves that dial it, every link up; stopped at the end."""
    network = Network(tmp_path, ["H", *LEAVES], [(leaf, "H") for leaf in LEAVES])
    try:
        network.start()
        for leaf in LEAVES:
            assert wait_link_state(network, leaf, "H", "connected"), leaf
        yield network
    finally:
        network.finalize()


def test_leaves_hear_each_other_through_the_hub(star: Network) -> None:
    network = star
    clients: list[PahoClient] = []
    try:
        base = unique("star")
        subscribers = {}
        for broker in ["H", *LEAVES]:
            client = PahoClient(network.ports[broker])
            client.connect()
            client.subscribe(f"{base}/#", qos=1)
            subscribers[broker] = client
            clients.append(client)
        # Each leaf is asked for the one filter (the hub's and the other leaves' subscribers
        # aggregate into one proxy); the hub is asked by each leaf for it too.
        for leaf in LEAVES:
            wait_proxies(network, leaf, "H", 1)
            wait_proxies(network, "H", leaf, 1)
        for broker in ["H", *LEAVES]:
            publisher = PahoClient(network.ports[broker])
            publisher.connect()
            clients.append(publisher)
            publisher.publish(f"{base}/from-{broker}", broker.encode(), qos=1)
        expected = sorted(f"{base}/from-{broker}" for broker in ["H", *LEAVES])
        for broker, client in subscribers.items():
            got = sorted(m.topic for m in client.wait_messages(4))
            assert got == expected, broker
        # Once each: no copy loops back through the hub.
        watchers = list(subscribers.values())
        sync_sentinels(network, ["H", *LEAVES], f"{base}/sentinel", watchers)
        assert not any(len(without_sentinels(c.received())) > 4 for c in watchers)
        # A leaf's subscription going away leaves the others' proxies in place.
        subscribers["L1"].unsubscribe(f"{base}/#")
        wait_proxies(network, "H", "L1", 0)
        assert all(proxies_in(network, leaf, "H") == 1 for leaf in LEAVES)
    finally:
        for client in clients:
            client.close()


def test_a_queue_at_one_leaf_registered_at_another_hears_every_broker(star: Network) -> None:
    """QMgrName across the hub: a RegSub at L1 for queue Q at L3 (docs/network.md §7)."""
    network = star
    clients: list[PahoClient] = []
    try:
        base = unique("star-q")
        queue = unique("Q")
        owner = PahoClient(network.ports["L3"], queue)
        owner.connect()
        registrar = connected(network.ports["L1"])
        clients += [owner, registrar]
        reply = registrar.command(
            {"Command": "RegSub", "Topic": f"{base}/#", "QMgrName": "L3", "QName": queue}
        )
        assert_ok(reply)
        # The registrar's reply, sentinel and remote subscriptions, asked of every leaf.
        for leaf in ("L2", "L3"):
            wait_proxies(network, leaf, "H", 3)
        for broker in ["H", *LEAVES]:
            publisher = PahoClient(network.ports[broker])
            publisher.connect()
            clients.append(publisher)
            publisher.publish(f"{base}/from-{broker}", broker.encode(), qos=2)
        got = sorted(m.payload for m in owner.wait_messages(4))
        assert got == sorted(broker.encode() for broker in ["H", *LEAVES])
        sync_sentinels(network, ["H", *LEAVES], f"{base}/sentinel", [owner])
        assert not len(without_sentinels(owner.received())) > 4
    finally:
        for client in clients:
            client.close()
