"""An MQ Publish with PubOpt Local and RetainPub: its retained copy stays at the broker that
received it, never answered to a neighbour's new proxy subscription, before and after that
broker restarts (docs/network.md §6; store schema 7, `retained.local_only`)."""

from __future__ import annotations

from mq.helpers import assert_ok, connected
from testsupport.paho import PahoClient
from testsupport.process import unique

from .netsupport import Network, sync_sentinels, wait_link_state, without_sentinels


def subscriber(port: int, topic_filter: str) -> PahoClient:
    client = PahoClient(port)
    client.connect()
    client.subscribe(topic_filter, qos=1)
    return client


def retained_values(client: PahoClient) -> list[tuple[str, bytes, bool]]:
    """What `client` received (topic, payload, RETAIN), the sentinels left out."""
    return sorted((m.topic, m.payload, m.retain) for m in without_sentinels(client.received()))


def test_a_local_retained_publication_stays_at_its_broker_across_a_restart(
    chain: Network,
) -> None:
    base = unique("localret")
    publisher = connected(chain.ports["A"])
    assert_ok(
        publisher.command(
            {"Command": "Publish", "Topic": f"{base}/local", "PubOpt": ["Local", "RetainPub"]},
            body=b"here only",
        )
    )
    assert_ok(
        publisher.command(
            {"Command": "Publish", "Topic": f"{base}/global", "PubOpt": "RetainPub"},
            body=b"everywhere",
        )
    )
    publisher.close()
    everywhere = (f"{base}/global", b"everywhere", True)
    here = (f"{base}/local", b"here only", True)

    # A later subscriber at C asks B, which asks A: A answers with the global one only,
    # and B keeps no copy of the Local one for its own later subscriber.
    at_c = subscriber(chain.ports["C"], f"{base}/#")
    at_c.wait_messages(1)
    at_b = subscriber(chain.ports["B"], f"{base}/+")
    at_b.wait_messages(1)
    at_a = subscriber(chain.ports["A"], f"{base}/#")
    at_a.wait_messages(2)
    sync_sentinels(chain, "ABC", f"{base}/sentinel", [at_c, at_b, at_a])
    assert retained_values(at_c) == [everywhere]
    assert retained_values(at_b) == [everywhere]
    assert retained_values(at_a) == [everywhere, here]
    for client in (at_c, at_b, at_a):
        client.close()

    # The scope is stored with the retained message: after A restarts, a new proxy (a
    # filter nobody asked for before) is answered from A's store without it.
    chain.brokers["A"].restart()
    assert wait_link_state(chain, "A", "B", "connected")
    assert wait_link_state(chain, "B", "A", "connected")
    late_c = subscriber(chain.ports["C"], f"{base}/local")
    late_b = subscriber(chain.ports["B"], f"{base}/local")
    late_a = subscriber(chain.ports["A"], f"{base}/+")
    late_a.wait_messages(2)
    sync_sentinels(chain, "ABC", f"{base}/local", [late_c, late_b, late_a])
    assert retained_values(late_c) == []
    assert retained_values(late_b) == []
    assert retained_values(late_a) == [everywhere, here]
    for client in (late_c, late_b, late_a):
        client.close()
