"""The MQ model across a chain A - B - C: global and `Local` RegSubs, content filters run at
the subscriber's broker, and Publish with PubOpt Local (docs/network.md §5-6; the seed's
Register Subscriber page)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mq.helpers import MQClient, assert_ok, connected
from telemq.cli.main import main
from telemq.store import JournalReader
from testsupport.paho import PahoClient
from testsupport.process import unique, users_and_acl, wait_until

from .netsupport import Network, wait_link_state
from .test_11_forwarding import wait_proxies


def barrier(subscriber: MQClient, publisher: MQClient) -> None:
    """Everything `publisher` published before now has reached `subscriber` (one path,
    QoS 1: in order)."""
    subscriber.sync(publisher)


def test_local_regsubs_get_only_what_is_published_at_their_broker(chain: Network) -> None:
    base = unique("mq")
    subscriber = connected(chain.ports["C"])
    assert_ok(subscriber.command({"Command": "RegSub", "Topic": f"{base}/global/#"}))
    assert_ok(
        subscriber.command({"Command": "RegSub", "Topic": f"{base}/local/#", "RegOpt": "Local"})
    )
    publisher_a = connected(chain.ports["A"])
    # The reply topic, the sentinel and the global subscription reach A; the Local one
    # never does.
    wait_proxies(chain, "A", "B", 3)
    publisher_c = connected(chain.ports["C"])
    publisher_a.publish(f"{base}/global/1", b"g from A")
    publisher_a.publish(f"{base}/local/1", b"l from A")
    publisher_c.publish(f"{base}/local/2", b"l from C")
    barrier(subscriber, publisher_a)
    barrier(subscriber, publisher_c)
    got = sorted((m.topic, m.payload) for m in subscriber.deliveries(base))
    assert got == [(f"{base}/global/1", b"g from A"), (f"{base}/local/2", b"l from C")]
    for client in (subscriber, publisher_a, publisher_c):
        client.close()


def test_a_content_filter_runs_at_the_subscribers_broker(chain: Network) -> None:
    base = unique("filter")
    subscriber = connected(chain.ports["C"])
    assert_ok(
        subscriber.command({"Command": "RegSub", "Topic": f"{base}/#", "Filter": "temp > 30"})
    )
    publisher = connected(chain.ports["A"])
    wait_proxies(chain, "A", "B", 3)
    publisher.publish(f"{base}/t", b'{"temp": 20}')
    publisher.publish(f"{base}/t", b'{"temp": 35}')
    barrier(subscriber, publisher)
    assert [m.payload for m in subscriber.deliveries(base)] == [b'{"temp": 35}']
    subscriber.close()
    publisher.close()


def test_the_origin_broker_is_journaled_and_read_by_filters(chain: Network) -> None:
    """`Properties.Broker` is the broker a publication was made at, in the filters of
    every broker it reaches and in each one's journal (`origin`, docs/network.md §6)."""
    base = unique("origin")
    subscriber = connected(chain.ports["C"])
    assert_ok(
        subscriber.command(
            {"Command": "RegSub", "Topic": f"{base}/#", "Filter": "Properties.Broker = 'A'"}
        )
    )
    publishers = {name: connected(chain.ports[name]) for name in ("A", "B", "C")}
    # Each client's reply and sentinel subscriptions at B and C, and the filtered one.
    wait_proxies(chain, "A", "B", 7)
    for name, publisher in publishers.items():
        publisher.publish(f"{base}/t", f"from {name}".encode())
    for publisher in publishers.values():
        barrier(subscriber, publisher)
    assert [m.payload for m in subscriber.deliveries(base)] == [b"from A"]

    def journaled() -> dict[bytes, str | None]:
        with JournalReader(chain.brokers["C"].data_dir) as reader:
            first, last = reader.bounds()
            rows = reader.rows(first, last)
        return {row[6]: row[10] for row in rows if row[2] == f"{base}/t"}

    expected = {b"from A": "A", b"from B": "B", b"from C": "C"}
    assert wait_until(lambda: journaled() == expected, 10.0), journaled()
    for client in (subscriber, *publishers.values()):
        client.close()


def test_publish_with_pubopt_local_stays_at_its_broker(chain: Network) -> None:
    base = unique("pubopt")
    far = connected(chain.ports["C"])
    assert_ok(far.command({"Command": "RegSub", "Topic": f"{base}/#"}))
    near = connected(chain.ports["A"])
    assert_ok(near.command({"Command": "RegSub", "Topic": f"{base}/#"}))
    wait_proxies(chain, "A", "B", 3)
    publisher = connected(chain.ports["A"])
    assert_ok(
        publisher.command(
            {"Command": "Publish", "Topic": f"{base}/local", "PubOpt": "Local"}, body=b"here"
        )
    )
    assert_ok(publisher.command({"Command": "Publish", "Topic": f"{base}/all"}, body=b"all"))
    near.wait_deliveries(2, base)
    barrier(far, publisher)
    assert [m.topic for m in far.wait_deliveries(1, base)] == [f"{base}/all"]
    assert sorted(m.topic for m in near.deliveries(base)) == [f"{base}/all", f"{base}/local"]
    for client in (far, near, publisher):
        client.close()


def test_an_admin_lists_proxy_subscriptions_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = users_and_acl({"root": "secret"}, []).replace(
        'name = "root"', 'name = "root"\nadmin = true'
    )
    network = Network(tmp_path, ["A", "B", "C"], [("A", "B"), ("B", "C")], extra=admin)
    try:
        network.start()
        for broker, link in (("A", "B"), ("C", "B")):
            assert wait_link_state(network, broker, link, "connected"), (broker, link)
        base = unique("listed")
        subscriber = PahoClient(network.ports["C"])
        subscriber.connect()
        subscriber.subscribe(f"{base}/#", qos=1)
        wait_proxies(network, "B", "C", 1)
        port = str(network.ports["B"])
        assert main(["subs", "list", "-p", port, "-u", "root", "-P", "secret"]) == 0
        out = capsys.readouterr().out
        proxies = out[out.index("proxy subscription 1:") :]
        assert "Proxy: C" in proxies and f"Topic: {base}/#" in proxies
        # Both directions: C asked B for it (`from`), and B asks A for it on C's behalf.
        blocks = [block for block in proxies.split("proxy subscription ")[1:] if base in block]
        directions = sorted(
            line.split(": ")[1]
            for block in blocks
            for line in block.splitlines()
            if line.strip().startswith(("Proxy:", "Direction:", "Count:"))
        )
        assert directions == sorted(["C", "from", "A", "to", "1"]), blocks
        assert f"Topic: {base}/#" not in out[: out.index("proxy subscription 1:")]
        assert main(["subs", "list", "-p", port, "-u", "root", "-P", "secret", "--no-proxies"]) == 0
        assert "proxy subscription" not in capsys.readouterr().out
        subscriber.close()
    finally:
        network.finalize()
