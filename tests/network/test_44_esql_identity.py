"""ESQL's ``Root.MQMD.UserIdentifier`` at another broker: a content filter at C names the
user a publication had at A, as ``Properties.UserId`` does (docs/filters.md §2,
docs/network.md §6)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mq.helpers import MQClient, assert_ok, connected
from testsupport.paho import PahoClient
from testsupport.process import unique, users_and_acl

from .conftest import running_chain
from .netsupport import Network
from .test_11_forwarding import wait_proxies

USERS = users_and_acl({"alice": "alice-secret"}, [])


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Network]:
    """A - B - C, each with a user alice besides the link users."""
    yield from running_chain(tmp_path, USERS)


def test_root_mqmd_user_identifier_is_the_user_at_the_origin(chain: Network) -> None:
    base = unique("esql")
    at_c = connected(chain.ports["C"])
    filter_text = "Root.MQMD.UserIdentifier = 'alice'"
    assert_ok(at_c.command({"Command": "RegSub", "Topic": f"{base}/#", "Filter": filter_text}))
    plain = PahoClient(chain.ports["C"])
    plain.connect()
    plain.subscribe(f"{base}/#", qos=1)
    wait_proxies(chain, "A", "B", 3)  # at_c's replies, sentinel and filter (plain's too)
    alice = MQClient(chain.ports["A"], "pub-alice", username="alice", password="alice-secret")
    alice.connect()
    anonymous = connected(chain.ports["A"], "pub-anonymous")
    for qos in (0, 1):
        alice.publish(f"{base}/t", f"alice {qos}", qos=qos)
        anonymous.publish(f"{base}/t", f"anonymous {qos}", qos=qos)
    # Once the unfiltered subscriber at C has all four, C has routed them all.
    plain.wait_messages(4)
    at_c.sync(alice)
    at_c.sync(anonymous)
    assert sorted(m.payload for m in at_c.deliveries(base)) == [b"alice 0", b"alice 1"]
    for client in (at_c, alice, anonymous):
        client.close()
    plain.close()
