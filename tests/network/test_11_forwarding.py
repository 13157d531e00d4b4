"""Publications cross a chain of brokers A - B - C by proxy subscriptions: paho-mqtt clients
at each end, `$SYS/broker/links/...` for the proxy counts (docs/network.md §5-6)."""

from __future__ import annotations

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from testsupport.paho import MQTT5, PahoClient, sys_value
from testsupport.process import unique, wait_until

from .netsupport import (
    LINK_TIMEOUT,
    Network,
    sync_sentinels,
    wait_link_state,
    without_sentinels,
)


def proxies_in(network: Network, broker: str, link: str) -> int:
    """Proxy subscriptions `link` asked of `broker` (its `$SYS`)."""
    topic = f"$SYS/broker/links/{link}/proxy subscriptions/in"
    value = sys_value(network.ports[broker], topic, 1.0)
    return -1 if value is None else int(value)


def wait_proxies(network: Network, broker: str, link: str, count: int) -> None:
    assert wait_until(lambda: proxies_in(network, broker, link) == count, LINK_TIMEOUT, 0.2), (
        broker,
        link,
        proxies_in(network, broker, link),
    )


def test_a_subscriber_at_one_end_gets_what_is_published_at_the_other(chain: Network) -> None:
    base = unique("net")
    subscriber = PahoClient(chain.ports["C"])
    subscriber.connect()
    subscriber.subscribe(f"{base}/#", qos=2)
    # Two subscriptions of B (one of them C's proxy) ask A for one proxy, not two.
    local_b = PahoClient(chain.ports["B"])
    local_b.connect()
    local_b.subscribe(f"{base}/#", qos=1)
    wait_proxies(chain, "B", "C", 1)
    wait_proxies(chain, "A", "B", 1)

    publisher = PahoClient(chain.ports["A"])
    publisher.connect()
    for qos in (0, 1, 2):
        publisher.publish(f"{base}/q{qos}", b"from A at QoS %d" % qos, qos=qos)
    received = subscriber.wait_messages(3)
    assert sorted((m.topic, m.payload, m.qos) for m in received) == [
        (f"{base}/q{qos}", b"from A at QoS %d" % qos, qos) for qos in (0, 1, 2)
    ]
    assert len(local_b.wait_messages(3)) == 3
    # Once each: nothing comes back to A, nothing arrives twice (a second copy would have
    # come before the sentinels).
    sync_sentinels(chain, "ABC", f"{base}/sentinel", [subscriber, local_b])
    assert len(without_sentinels(subscriber.received())) == 3
    assert len(without_sentinels(local_b.received())) == 3
    for client in (subscriber, local_b, publisher):
        client.close()


def test_publications_flow_both_ways_and_not_back(chain: Network) -> None:
    base = unique("both")
    at_a = PahoClient(chain.ports["A"])
    at_a.connect()
    at_a.subscribe(f"{base}/#", qos=1)
    at_c = PahoClient(chain.ports["C"])
    at_c.connect()
    at_c.subscribe(f"{base}/#", qos=1)
    wait_proxies(chain, "C", "B", 1)  # A's subscription reached C
    wait_proxies(chain, "A", "B", 1)  # and C's reached A
    at_a.publish(f"{base}/from-a", b"a", qos=1)
    at_c.publish(f"{base}/from-c", b"c", qos=1)
    for client in (at_a, at_c):
        got = sorted(m.topic for m in client.wait_messages(2))
        assert got == [f"{base}/from-a", f"{base}/from-c"]
    sync_sentinels(chain, "ABC", f"{base}/sentinel", [at_a, at_c])
    for client in (at_a, at_c):
        assert len(without_sentinels(client.received())) == 2
        client.close()


def test_a_v5_message_keeps_its_properties_and_loses_the_envelope(chain: Network) -> None:
    topic = f"{unique('props')}/t"
    subscriber = PahoClient(chain.ports["C"], version=MQTT5)
    subscriber.connect()
    subscriber.subscribe(topic, qos=1)
    wait_proxies(chain, "A", "B", 1)
    publisher = PahoClient(chain.ports["A"], version=MQTT5)
    publisher.connect()
    props = Properties(PacketTypes.PUBLISH)
    props.ContentType = "text/plain"
    props.UserProperty = [("telemq-path", "the client's own"), ("k", "v")]
    publisher.publish(topic, b"hello", qos=1, properties=props)
    [message] = subscriber.wait_messages(1)
    assert message.payload == b"hello"
    assert message.properties.ContentType == "text/plain"
    assert message.properties.UserProperty == [("telemq-path", "the client's own"), ("k", "v")]
    publisher.close()
    subscriber.close()


def test_proxies_go_when_their_subscriptions_go(chain: Network) -> None:
    base = unique("gone")
    clean = PahoClient(chain.ports["C"])
    clean.connect()
    clean.subscribe(f"{base}/one", qos=1)
    clean.subscribe(f"{base}/two", qos=1)
    wait_proxies(chain, "A", "B", 2)
    clean.unsubscribe(f"{base}/one")
    wait_proxies(chain, "B", "C", 1)
    wait_proxies(chain, "A", "B", 1)
    clean.close()  # a clean session ends: its subscriptions, and so the proxies, go
    wait_proxies(chain, "B", "C", 0)
    wait_proxies(chain, "A", "B", 0)


def test_proxies_are_resynchronised_after_the_middle_broker_restarts(chain: Network) -> None:
    base = unique("resync")
    durable = PahoClient(chain.ports["C"], "durable-" + base, clean=False)
    durable.connect()
    durable.subscribe(f"{base}/#", qos=1)
    wait_proxies(chain, "A", "B", 1)
    chain.brokers["B"].restart()
    for broker, link in (("A", "B"), ("C", "B")):
        assert wait_link_state(chain, broker, link, "connected")
    wait_proxies(chain, "A", "B", 1)
    wait_proxies(chain, "B", "C", 1)
    publisher = PahoClient(chain.ports["A"])
    publisher.connect()
    publisher.publish(f"{base}/after", b"x", qos=1)
    [message] = durable.wait_messages(1)
    assert message.topic == f"{base}/after"
    publisher.close()
    durable.close()
