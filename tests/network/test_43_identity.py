"""The publisher's identity crosses the network: at every broker a forwarded publication
keeps the ClientId and UserId it was published with, in content filters, in retained
answers and in the journal, and the envelope that carries them never reaches a subscriber
(docs/network.md §3, §6)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mq.helpers import MQClient, assert_ok, connected
from telemq.store import JournalReader
from testsupport.paho import MQTT5, PahoClient
from testsupport.process import unique, users_and_acl, wait_until

from .conftest import running_chain
from .netsupport import Network
from .test_11_forwarding import wait_proxies

USERS = users_and_acl({"alice": "alice-secret"}, [])
WHO = "Properties.UserId = 'alice' AND Properties.ClientId = 'pub-alice'"


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Network]:
    """A - B - C, each with a user alice besides the link users."""
    yield from running_chain(tmp_path, USERS)


def journaled(network: Network, broker: str, topic: str) -> list[tuple[bytes, str, str]]:
    """(payload, client_id, user_id) of the journal rows of `topic` at `broker`."""
    with JournalReader(network.brokers[broker].data_dir) as reader:
        first, last = reader.bounds()
        rows = reader.rows(first, last)
    return sorted((bytes(row[6]), row[7], row[8]) for row in rows if row[2] == topic)


def test_forwarded_publications_keep_their_publishers_identity(chain: Network) -> None:
    base = unique("who")
    at_c = connected(chain.ports["C"])
    assert_ok(at_c.command({"Command": "RegSub", "Topic": f"{base}/#", "Filter": WHO}))
    plain = PahoClient(chain.ports["C"], version=MQTT5)
    plain.connect()
    plain.subscribe(f"{base}/#", qos=2)
    wait_proxies(chain, "A", "B", 3)  # at_c's replies, sentinel and filter (plain's too)
    alice = MQClient(chain.ports["A"], "pub-alice", username="alice", password="alice-secret")
    alice.connect()
    anonymous = connected(chain.ports["A"], "pub-anonymous")
    for qos in (0, 1, 2):
        alice.publish(f"{base}/t", f"alice {qos}", qos=qos)
        anonymous.publish(f"{base}/t", f"anonymous {qos}", qos=qos)
    # Once the unfiltered subscriber at C has all six, C has routed them all.
    plain.wait_messages(6)
    at_c.sync(alice)
    at_c.sync(anonymous)
    assert sorted(m.payload for m in at_c.deliveries(base)) == [
        b"alice 0",
        b"alice 1",
        b"alice 2",
    ]
    expected = sorted(
        [(f"alice {q}".encode(), "pub-alice", "alice") for q in (0, 1, 2)]
        + [(f"anonymous {q}".encode(), "pub-anonymous", "") for q in (0, 1, 2)]
    )
    for broker in ("A", "B", "C"):
        assert wait_until(lambda b=broker: journaled(chain, b, f"{base}/t") == expected, 10.0), (
            broker,
            journaled(chain, broker, f"{base}/t"),
        )
    # An MQTT 5.0 subscriber sees the message's own properties, never the envelope.
    assert len(plain.received()) == 6
    for received in plain.received():
        names = [name for name, _ in getattr(received.properties, "UserProperty", [])]
        assert not any(name.startswith("telemq-") for name in names), (received, names)
    for client in (at_c, alice, anonymous):
        client.close()
    plain.close()


def test_a_retained_answer_keeps_its_publishers_identity(chain: Network) -> None:
    """A retained publication reaches a later subscriber at C as a sync copy (answering a
    new proxy): the filter there admits it by the publisher A had."""
    base = unique("whoret")
    alice = PahoClient(
        chain.ports["A"], "pub-alice", version=MQTT5, username="alice", password="alice-secret"
    )
    alice.connect()
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = [("telemq-client", "not the publisher"), ("k", "v")]
    alice.publish(f"{base}/r", "kept", qos=1, retain=True, properties=props)
    alice.close()
    later = connected(chain.ports["C"])
    assert_ok(later.command({"Command": "RegSub", "Topic": f"{base}/#", "Filter": WHO}))
    assert [(m.payload, m.retain) for m in later.wait_deliveries(1, base)] == [(b"kept", True)]
    # A client's own telemq-client user property stays the message's, at every broker.
    spoofed = WHO.replace("pub-alice", "not the publisher")
    fooled = connected(chain.ports["C"])
    assert_ok(fooled.command({"Command": "RegSub", "Topic": f"{base}/#", "Filter": spoofed}))
    plain = PahoClient(chain.ports["B"], version=MQTT5)
    plain.connect()
    plain.subscribe(f"{base}/#", qos=1)
    [received] = plain.wait_messages(1)
    assert getattr(received.properties, "UserProperty", []) == [
        ("telemq-client", "not the publisher"),
        ("k", "v"),
    ]
    fooled.sync()
    assert fooled.deliveries(base) == []
    for client in (later, fooled):
        client.close()
    plain.close()
