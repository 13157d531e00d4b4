"""A link cut every second for a minute while subscriptions come and go at the brokers behind
it: afterwards every broker holds exactly the proxy subscriptions the live subscriptions
need (none twice, none stale), and a last round of publications reaches each live
subscriber once (docs/network.md §5, `sync` and mark-and-sweep).

A - B goes through a `Relay` that is cut every second; B - C is direct. Seeded, bounded:
60 s of flapping, a few hundred subscription changes, every wait with a deadline."""

from __future__ import annotations

import random
import time
from pathlib import Path

from testsupport.paho import PahoClient
from testsupport.process import unique, wait_until

from .netsupport import (
    LINK_TIMEOUT,
    Network,
    sync_sentinels,
    wait_link_state,
    without_sentinels,
)
from .test_11_forwarding import proxies_in

FLAP_SECONDS = 60.0
TOPICS = 8


def test_a_flapping_link_leaves_exactly_the_proxies_needed(tmp_path: Path) -> None:
    rng = random.Random(31)
    base = unique("flap")
    topics = [f"{base}/t{n}" for n in range(TOPICS)]
    network = Network(tmp_path, ["A", "B", "C"], [("A", "B"), ("B", "C")], relayed=[("A", "B")])
    clients: list[PahoClient] = []
    try:
        network.start()
        for broker, link in (("A", "B"), ("C", "B")):
            assert wait_link_state(network, broker, link, "connected"), (broker, link)
        subscribers = {
            f"{broker}{n}": PahoClient(network.ports[broker]) for broker in "BC" for n in range(2)
        }
        subscribed: dict[str, set[str]] = {name: set() for name in subscribers}
        for client in subscribers.values():
            client.connect()
            clients.append(client)
        relay = network.relays[("A", "B")]
        changes = 0
        started = next_cut = time.monotonic()
        while time.monotonic() - started < FLAP_SECONDS:
            if time.monotonic() >= next_cut:
                relay.cut()
                next_cut += 1.0
            name = rng.choice(sorted(subscribers))
            topic = rng.choice(topics)
            if topic in subscribed[name]:
                subscribers[name].unsubscribe(topic)
                subscribed[name].discard(topic)
            else:
                subscribers[name].subscribe(topic, qos=1)
                subscribed[name].add(topic)
            changes += 1
            time.sleep(rng.uniform(0.01, 0.1))
        assert changes > 200
        assert relay.connections > 30, "the link did not come back after the cuts"
        assert wait_link_state(network, "A", "B", "connected")

        needed_from_a = set().union(*subscribed.values())
        needed_from_b = set().union(*(subscribed[n] for n in subscribed if n.startswith("C")))
        assert wait_until(
            lambda: proxies_in(network, "A", "B") == len(needed_from_a), LINK_TIMEOUT, 0.2
        ), (proxies_in(network, "A", "B"), len(needed_from_a))
        assert wait_until(
            lambda: proxies_in(network, "B", "C") == len(needed_from_b), LINK_TIMEOUT, 0.2
        ), (proxies_in(network, "B", "C"), len(needed_from_b))

        for client in subscribers.values():
            client.messages.clear()
        publisher = PahoClient(network.ports["A"])
        publisher.connect()
        clients.append(publisher)
        for topic in topics:
            publisher.publish(topic, b"last round", qos=1)
        for name, client in subscribers.items():
            count = len(subscribed[name])
            assert wait_until(
                lambda c=client, n=count: len(c.received()) >= n, LINK_TIMEOUT, 0.1
            ), (name, subscribed[name], client.received())
        # None twice: every copy comes from A, over the same links as a sentinel A publishes
        # after the last round, on a topic the subscriber has, so a second copy would have
        # come before it.
        for name, client in subscribers.items():
            if subscribed[name]:
                sync_sentinels(network, "A", min(subscribed[name]), [client])
        assert not any(
            len(without_sentinels(c.received())) > len(subscribed[n])
            for n, c in subscribers.items()
        )
        for name, client in subscribers.items():
            got = sorted(m.topic for m in without_sentinels(client.received()))
            assert got == sorted(subscribed[name]), name
    finally:
        for client in clients:
            client.close()
        network.finalize()
