"""ESQL's ``Root.MQMD.UserIdentifier`` in a content filter is the publisher's user name
(``Properties.UserId``, docs/filters.md §2): a subscriber filtering on it receives alice's
publications and not bob's. Other ``Root`` paths are refused with reason 3150.

Black box: a broker subprocess with password users, paho clients over TCP, RegSub sent to
the control queue as JSON commands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testsupport.process import users_and_acl

from .conftest import BrokerFactory
from .helpers import PahoClient, unique, write_config

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
RESPONSE = "SYSTEM.BROKER.RESPONSE/"
PASSWORDS = {"alice": "alice-pw-Ei1", "bob": "bob-pw-Ei2", "carol": "carol-pw-Ei3"}


def regsub(client: PahoClient, topic: str, text: str) -> dict[str, Any]:
    """One RegSub of `topic` with the filter `text` for the client's own queue; the pscr."""
    reply_topic = RESPONSE + client.client_id
    before = len(client.received(reply_topic))
    psc = {"Command": "RegSub", "Topic": [topic], "Filter": text}
    client.publish(CONTROL_QUEUE, json.dumps({"psc": psc}).encode(), qos=1)
    reply = client.wait_messages(before + 1, topic=reply_topic)[before]
    pscr: dict[str, Any] = json.loads(reply.payload)["pscr"]
    return pscr


def test_root_mqmd_user_identifier_is_the_publishers_user(
    broker_factory: BrokerFactory,
    paho_factory: Callable[..., PahoClient],
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "esql.toml", "allow_anonymous = false\n\n" + users_and_acl(PASSWORDS, [])
    )
    broker = broker_factory(config=config)

    def connect_as(user: str) -> PahoClient:
        client = paho_factory(broker.port, unique(user), username=user, password=PASSWORDS[user])
        client.connect()
        assert client.subscribe(RESPONSE + client.client_id, 1) == [1]
        return client

    topic = unique("esql/")
    carol = connect_as("carol")
    pscr = regsub(carol, topic, "Root.MQMD.UserIdentifier = 'alice'")
    assert pscr["Completion"] == "ok", pscr
    others = connect_as("carol")  # another queue of carol's: everyone but alice
    pscr = regsub(others, topic, "NOT Root.MQMD.UserIdentifier = 'alice'")
    assert pscr["Completion"] == "ok", pscr

    # Anything else under Root is refused, naming what there is.
    refused = regsub(carol, topic, "Root.MQMD.PutApplName = 'x'")
    assert refused["Completion"] == "error", refused
    assert [int(r["Reason"]) for r in refused["Response"]] == [3150], refused
    assert "telemq's Root.MQMD has UserIdentifier" in json.dumps(refused), refused

    alice = connect_as("alice")
    bob = connect_as("bob")
    # Not JSON: the alias is a property, the payload is never needed.
    alice.publish(topic, b"from alice", qos=1)
    bob.publish(topic, b"from bob", qos=1)
    alice.publish(topic, json.dumps({"Root": {"MQMD": {"UserIdentifier": "bob"}}}), qos=1)

    got = carol.wait_messages(2, topic=topic)
    assert [m.payload for m in got] == [
        b"from alice",
        b'{"Root": {"MQMD": {"UserIdentifier": "bob"}}}',
    ]
    (theirs,) = others.wait_messages(1, topic=topic)
    assert theirs.payload == b"from bob"
    # The sentinel: whatever carol or the other queue could still get has arrived.
    alice.publish(topic, b"last", qos=1)
    assert len(carol.wait_messages(3, topic=topic)) == 3
    assert [m.payload for m in others.received(topic)] == [b"from bob"]
