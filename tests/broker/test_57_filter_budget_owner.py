"""`limits.max_filter_time` is charged to the owner of the filters (docs/security.md "Limits").

A subscription is never skipped because of another user's filters: when one user's filters
spend the budget on a publication, that user's remaining filtered subscriptions are skipped
(counted in `$SYS/broker/filters/skipped`, logged naming the user), and every other user's
are evaluated. The journal keeps the publication whatever was skipped.

Black box: a broker subprocess with two users and a tiny budget, paho clients over TCP, the
journal read from the store file.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from pathlib import Path

import pytest

from telemq.store.sqlite import open_journal_reader
from testsupport.paho import sys_value
from testsupport.process import users_and_acl

from .conftest import BrokerFactory
from .helpers import PahoClient, unique, write_config

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
RESPONSE = "SYSTEM.BROKER.RESPONSE/"
PASSWORDS = {"alice": "alice-pw-Fb1", "bob": "bob-pw-Fb2"}
SLOW_FILTERS = 16  # alice's: a FilterSet (4 or more), each far beyond the budget alone
TERMS = 127  # LIKE terms per filter (size 255, under max_filter_size)
BUDGET = 1e-6  # seconds: less than any one of alice's filters takes


def slow_filter(rng: random.Random) -> str:
    """Distinct `s LIKE '%.....%' OR ...` filters: each scans the whole of `s` 127 times."""
    words = ("".join(rng.choice(string.ascii_lowercase) for _ in range(5)) for _ in range(TERMS))
    return " OR ".join(f"s LIKE '%{word}%'" for word in words)


def regsub(client: PahoClient, topic: str, text: str) -> None:
    """One RegSub of `topic` with the filter `text` for the client's own queue."""
    reply_topic = RESPONSE + client.client_id
    before = len(client.received(reply_topic))
    psc = {"Command": "RegSub", "Topic": [topic], "Filter": text}
    client.publish(CONTROL_QUEUE, json.dumps({"psc": psc}).encode(), qos=1)
    reply = client.wait_messages(before + 1, topic=reply_topic)[before]
    pscr = json.loads(reply.payload)["pscr"]
    assert pscr["Completion"] == "ok", pscr


def journaled(data_dir: Path, topic: str) -> list[bytes]:
    reader = open_journal_reader(data_dir)
    try:
        rows = reader.execute("SELECT payload FROM journal WHERE topic = ? ORDER BY seq", (topic,))
        return [bytes(row[0]) for row in rows]
    finally:
        reader.close()


def test_one_users_slow_filters_never_cost_another_user_the_publication(
    broker_factory: BrokerFactory,
    paho_factory: Callable[..., PahoClient],
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "budget.toml",
        "allow_anonymous = true\n\n"
        "[sys]\ninterval = 0.2\n\n"
        f"[limits]\nmax_filter_time = {BUDGET}\n\n" + users_and_acl(PASSWORDS, []),
    )
    broker = broker_factory(config=config)

    def connect_as(user: str) -> PahoClient:
        client = paho_factory(broker.port, unique(user), username=user, password=PASSWORDS[user])
        client.connect()
        assert client.subscribe(RESPONSE + client.client_id, 1) == [1]
        return client

    topic = unique("h/")
    alice = connect_as("alice")
    rng = random.Random(57)
    for _ in range(SLOW_FILTERS):
        regsub(alice, topic, slow_filter(rng))
    bob = connect_as("bob")  # registered last: evaluated after alice's filters
    regsub(bob, topic, "kind = 'reading'")

    publisher = paho_factory(broker.port, unique("pub"))
    publisher.connect()
    reading = json.dumps({"kind": "reading", "s": "x" * 60_000}).encode()
    other = json.dumps({"kind": "other", "s": "y" * 60_000}).encode()
    publisher.publish(topic, reading, qos=1)
    publisher.publish(topic, other, qos=1)

    # Bob's filter is evaluated on both: he gets the reading, not the other.
    (received,) = bob.wait_messages(1, topic=topic)
    assert received.payload == reading
    # Alice's first filter is evaluated on each publication, and spends her budget: her 15
    # others are skipped, twice.
    expected = str(2 * (SLOW_FILTERS - 1))
    skipped = sys_value(broker.port, "$SYS/broker/filters/skipped", 10.0, until=expected.__eq__)
    assert skipped == expected
    assert "of user 'alice' not evaluated" in broker.log_text()
    assert "of user 'bob'" not in broker.log_text()
    # The sentinel: anything Bob or Alice could still get for the two has arrived.
    publisher.publish(topic, json.dumps({"kind": "reading", "last": True}).encode(), qos=1)
    assert len(bob.wait_messages(2, topic=topic)) == 2
    assert alice.received(topic) == []
    # The journal has every publication, skipped filters or not.
    assert journaled(broker.data_dir, topic)[:2] == [reading, other]
