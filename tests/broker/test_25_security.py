"""Security review against a live broker: the side doors of docs/security.md.

One broker with users (one of them made with ``telemq passwd``), ACL rules, a second
listener bound to the subscription point ``scores``, $SYS every second and a 2 MiB packet
limit (so that command payloads above the 1 MiB command limit can be sent). Attackers try:
wildcard and ``$`` filters, overlapping wildcards, subscription points, shared MQ identities
and named subscriptions of another user, the command topics (RegSub, Publish, forged replies,
ReplyToQ), resuming another user's session by its client id, and oversized commands and
filters. Every refusal must carry its documented reason code, and the broker must keep
serving.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testsupport.process import users_and_acl

from .helpers import (
    BrokerProcess,
    PahoClient,
    RawClient,
    Will,
    free_port,
    publish_packet,
    unique,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
DEFAULT_STREAM = "SYSTEM.BROKER.DEFAULT.STREAM"
RESPONSE = "SYSTEM.BROKER.RESPONSE/"
NOT_AUTHORIZED = 3081
NOT_AUTHORIZED_CONNACK = 5
FAILURE = 0x80

TELEMQ = (sys.executable, "-m", "telemq")
PASSWORDS = {
    "alice": "alice-pw-Zq9",  # an admin
    "bob": "bob-pw-Xk2",
    "carol": "carol-pw-Vn4",
    "mallory": "mallory-pw-Wr7",
}
SHARED_INBOX = "shared-inbox"  # carol's queue, which bob is granted

ACL = [
    ("mallory", "command", "#", False),
    ("alice", "all", "#", True),
    ("alice", "subscribe", "$SYS/#", True),
    ("*", "command", CONTROL_QUEUE, True),
    ("*", "command", DEFAULT_STREAM, True),
    ("*", "subscribe", "SYSTEM.BROKER.RESPONSE/%c", True),
    ("*", "all", "open/#", True),
    ("bob", "queue", SHARED_INBOX, True),
    ("bob", "subscribe", "bobonly/#", True),
    ("*", "publish", "devices/%u/#", True),
    ("*", "subscribe", "devices/+/secret", False),
    ("*", "subscribe", "devices/#", True),
]


def _passwd_entry(name: str, password: str) -> str:
    """A [[users]] entry made by `telemq passwd` (password on stdin, never an argument)."""
    result = subprocess.run(
        [*TELEMQ, "passwd", name, "--password-stdin", "--iterations", "1000"],
        input=password + "\n",
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert password not in result.stdout and password not in result.stderr
    return result.stdout


def _config_text(point_port: int) -> str:
    lines = [
        'name = "QM.SEC"',
        'sub_points = ["scores"]',
        "allow_anonymous = true",
        "",
        "[sys]",
        "interval = 1.0",
        "",
        "[limits]",
        f"max_packet_size = {2 * 1024 * 1024}",
        "",
        "[[listeners]]",
        'host = "127.0.0.1"',
        "port = 1883",
        "",
        "[[listeners]]",
        'host = "127.0.0.1"',
        f"port = {point_port}",
        'sub_point = "scores"',
        "",
        _passwd_entry("alice", PASSWORDS["alice"]) + "admin = true\n",  # ListSubs sees all
    ]
    others = {user: PASSWORDS[user] for user in ("bob", "carol", "mallory")}
    return "\n".join(lines) + "\n" + users_and_acl(others, ACL)


class Broker:
    def __init__(self, process: BrokerProcess, point_port: int, config: Path) -> None:
        self.process = process
        self.port = process.port
        self.point_port = point_port
        self.config = config


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    workdir = tmp_path_factory.mktemp("security")
    point_port = free_port()
    config = write_config(workdir / "telemq.toml", _config_text(point_port))
    process = BrokerProcess(workdir / "broker", config=config).start()
    yield Broker(process, point_port, config)
    process.finalize()


Connect = Callable[..., PahoClient]


@pytest.fixture
def connect_as(paho_factory: Callable[..., PahoClient], broker: Broker) -> Connect:
    """``connect_as(user, client_id=None, port=None, clean=True)``: a connected paho client."""

    def make(
        user: str | None,
        client_id: str | None = None,
        *,
        port: int | None = None,
        clean: bool = True,
    ) -> PahoClient:
        client = paho_factory(port or broker.port, client_id or unique(user or "anon"), clean=clean)
        if user is not None:
            client.client.username_pw_set(user, PASSWORDS[user])
        client.connect()
        return client

    return make


# -- MQ commands over paho (JSON form) --------------------------------------------------------

# Clients already subscribed to their response topic (weak: ids of dead clients get reused).
_REPLIES_SUBSCRIBED: weakref.WeakSet[PahoClient] = weakref.WeakSet()


def command(
    client: PahoClient,
    psc: dict[str, Any],
    *,
    mqmd: dict[str, str] | None = None,
    body: str | None = None,
    topic: str | None = None,
    raw: bytes | None = None,
) -> dict[str, Any]:
    """Send one command, wait for its reply on the client's own response topic; the pscr."""
    reply_topic = RESPONSE + client.client_id
    if client not in _REPLIES_SUBSCRIBED:
        assert client.subscribe(reply_topic, 1) == [1]
        _REPLIES_SUBSCRIBED.add(client)
    correl = uuid.uuid4().hex[:16].upper()
    document: dict[str, Any] = {"mqmd": {"CorrelId": correl, **(mqmd or {})}, "psc": psc}
    if body is not None:
        document["body"] = body
    payload = raw if raw is not None else json.dumps(document).encode()
    name = psc.get("Command", "")
    destination = topic or (DEFAULT_STREAM if name in ("Publish", "DeletePub") else CONTROL_QUEUE)
    before = len(client.received(reply_topic))
    client.publish(destination, payload, qos=1)

    def found() -> dict[str, Any] | None:
        for message in client.received(reply_topic)[before:]:
            reply: dict[str, Any] = json.loads(message.payload)
            if raw is not None or reply.get("mqmd", {}).get("CorrelId", "").upper() == correl:
                return reply
        return None

    assert wait_until(lambda: found() is not None, 10.0), f"no reply to {psc}"
    reply = found()
    assert reply is not None
    pscr: dict[str, Any] = reply["pscr"]
    return pscr


def reasons(pscr: dict[str, Any]) -> list[int]:
    return [int(response["Reason"]) for response in pscr.get("Response", [])]


def list_subs(client: PahoClient, **psc: str) -> list[dict[str, str]]:
    """ListSubs, one dict of first values per subscription, without the response and sync
    subscriptions the test helpers make."""
    pscr = command(client, {"Command": "ListSubs", **psc})
    assert pscr["Completion"] == "ok", pscr
    listed = [
        {
            key: (value[0] if isinstance(value, list) and len(value) == 1 else value)
            for key, value in subscription.items()
        }
        for subscription in pscr.get("Subscriptions", [])
    ]
    return [s for s in listed if not str(s["Topic"]).startswith((RESPONSE, "open/sync/"))]


_SYNC_SUBSCRIBED: weakref.WeakSet[PahoClient] = weakref.WeakSet()


def sync(receiver: PahoClient, publisher: PahoClient) -> None:
    """Whatever `publisher` sent before this has been routed to `receiver` by now."""
    topic = f"open/sync/{receiver.client_id}"
    if receiver not in _SYNC_SUBSCRIBED:
        assert receiver.subscribe(topic, 1) == [1]
        _SYNC_SUBSCRIBED.add(receiver)
    marker = uuid.uuid4().hex
    publisher.publish(topic, marker, qos=1)
    assert wait_until(
        lambda: any(m.payload == marker.encode() for m in receiver.received(topic)), 10.0
    )


def still_serving(connect_as: Connect) -> None:
    client = connect_as("bob")
    topic = unique("open/alive/")
    client.subscribe(topic, 1)
    client.publish(topic, b"ping", qos=1)
    assert client.wait_messages(1, topic=topic)[0].payload == b"ping"


# -- passwords ------------------------------------------------------------------------------


def test_the_config_and_the_log_never_hold_a_password(broker: Broker, connect_as: Connect) -> None:
    text = broker.config.read_text()
    assert text.count("pbkdf2_sha256$") == len(PASSWORDS)
    for password in PASSWORDS.values():
        assert password not in text
    connect_as("alice")  # the hash from `telemq passwd` verifies
    for user, password in [("alice", "Wrong-Pass-123"), ("nobody", "Unknown-Pass-456")]:
        with RawClient(broker.port) as raw:
            ack = raw.connect(unique("bad"), username=user, password=password.encode())
            assert ack.return_code == 4  # bad user name or password
    log = broker.process.log_text()
    for secret in ["Wrong-Pass-123", "Unknown-Pass-456", *PASSWORDS.values()]:
        assert secret not in log


# -- wildcards and `$` topics -----------------------------------------------------------------


def test_wildcard_filters_cannot_reach_denied_topics(connect_as: Connect) -> None:
    mallory = connect_as("mallory")
    filters = [
        "#",
        "+/#",
        "+/secret",
        "+/+/secret",
        "$SYS/#",
        "devices/#",
        "devices/+/+",
        "devices/a/secret",
        "SYSTEM.BROKER.RESPONSE/#",
        "devices/+/temp",
        "open/#",
    ]
    codes = mallory.subscribe([(f, 1) for f in filters])
    assert codes == [FAILURE] * 9 + [1, 1]


def test_hash_does_not_deliver_dollar_topics(connect_as: Connect) -> None:
    everything = connect_as("alice")
    assert everything.subscribe("#", 0) == [0]
    sys_topics = connect_as("alice")
    assert sys_topics.subscribe("$SYS/#", 0) == [0]
    sys_topics.wait_messages(3, timeout=10.0)
    # A $SYS round (20 of its topics) more while `#` is subscribed: what `#` would have got.
    sys_topics.wait_messages(len(sys_topics.received()) + 20, timeout=10.0)
    assert all(m.topic.startswith("$SYS/") for m in sys_topics.received())
    assert not [m.topic for m in everything.received() if m.topic.startswith("$")]
    # Nobody may write into $SYS: `all #` does not reach it either.
    everything.publish("$SYS/broker/version", b"forged", qos=1, retain=True)
    late = connect_as("alice")
    assert late.subscribe("$SYS/broker/version", 0) == [0]
    late.wait_messages(1, topic="$SYS/broker/version")
    sys_topics.wait_messages(len(sys_topics.received()) + 20, timeout=10.0)  # one more round
    assert b"forged" not in [m.payload for m in late.received() + sys_topics.received()]


def test_overlapping_wildcards_are_granted_only_in_part(connect_as: Connect) -> None:
    bob = connect_as("bob")
    alice = connect_as("alice")
    pscr = command(
        bob,
        {
            "Command": "RegSub",
            "Topic": ["devices/+/temp", "devices/#", "devices/a/secret", "+/#"],
            "RegOpt": ["NewPubsOnly"],
        },
    )
    assert pscr["Completion"] == "warning", pscr
    assert reasons(pscr) == [NOT_AUTHORIZED] * 3
    refused = [response["Topic"] for response in pscr["Response"]]
    assert refused == ["devices/#", "devices/a/secret", "+/#"]
    topics = [s["Topic"] for s in list_subs(alice, QName=bob.client_id)]
    assert topics == ["devices/+/temp"]
    alice.publish("devices/a/secret", b"hidden", qos=1)
    alice.publish("devices/a/temp", b"21", qos=1)
    sync(bob, alice)
    assert [m.topic for m in bob.received() if m.topic.startswith("devices/")] == ["devices/a/temp"]


# -- subscription points --------------------------------------------------------------------


def test_a_subscription_point_is_no_way_into_a_topic_space(
    broker: Broker, connect_as: Connect
) -> None:
    mallory = connect_as("mallory", port=broker.point_port)
    assert mallory.subscribe([("secret/#", 1), ("devices/#", 1), ("open/#", 1)]) == [
        FAILURE,
        FAILURE,
        1,
    ]
    alice = connect_as("alice", port=broker.point_port)
    assert alice.subscribe("secret/#", 1) == [1]
    mallory.publish("secret/at-point", b"forged", qos=1)  # dropped: no publish permission
    sync(alice, mallory)
    assert alice.received("secret/at-point") == []
    # A RegSub from the default listener naming the point is checked the same way.
    bob = connect_as("bob")
    pscr = command(bob, {"Command": "RegSub", "Topic": ["secret/#"], "SubPoint": "scores"})
    assert (pscr["Completion"], reasons(pscr)) == ("warning", [NOT_AUTHORIZED])
    pscr = command(bob, {"Command": "RegSub", "Topic": ["open/p"], "SubPoint": "nowhere"})
    assert (pscr["Completion"], reasons(pscr)) == ("error", [3309])
    assert list_subs(alice, QName=bob.client_id) == []


# -- shared identities and named subscriptions -------------------------------------------------


def test_another_user_cannot_join_a_shared_identity(connect_as: Connect) -> None:
    alice = connect_as("alice")
    queue = unique("aq")
    topic = "secret/shared"
    pscr = command(
        alice,
        {
            "Command": "RegSub",
            "Topic": [topic],
            "QName": queue,
            "SubIdentity": "alice-1",
            "RegOpt": ["JoinShared", "VariableUserId"],
        },
    )
    assert pscr["Completion"] == "ok", pscr
    bob = connect_as("bob")
    pscr = command(
        bob,
        {
            "Command": "RegSub",
            "Topic": [topic],
            "QName": queue,
            "SubIdentity": "bob-1",
            "RegOpt": ["JoinShared"],
        },
    )
    # The queue is alice's: bob may not register for it at all (queue grants: docs/security.md).
    assert (pscr["Completion"], reasons(pscr)) == ("error", [NOT_AUTHORIZED]), pscr
    (subscription,) = list_subs(alice, QName=queue)
    assert subscription["SubIdentity"] == "alice-1 (shared)"
    # Not even on a topic bob may read (without the queue, the identity would answer 3078).
    readable = unique("open/shared-")
    pscr = command(
        alice,
        {
            "Command": "RegSub",
            "Topic": [readable],
            "QName": queue,
            "SubIdentity": "alice-2",
            "RegOpt": ["JoinShared"],
        },
    )
    assert pscr["Completion"] == "ok", pscr
    pscr = command(
        bob,
        {
            "Command": "RegSub",
            "Topic": [readable],
            "QName": queue,
            "SubIdentity": "bob-2",
            "RegOpt": ["JoinShared"],
        },
    )
    assert (pscr["Completion"], reasons(pscr)) == ("error", [NOT_AUTHORIZED]), pscr
    members = {s["Topic"]: s["SubIdentity"] for s in list_subs(alice, QName=queue)}
    assert members[readable] == "alice-2 (shared)"


def test_another_user_cannot_take_over_a_named_subscription(connect_as: Connect) -> None:
    """docs/mq.md: an identity belongs to the user that registered it (3078); a subscription
    owned by another user cannot be addressed (3151) without VariableUserId."""
    alice = connect_as("alice")
    name = unique("alice-named-")
    pscr = command(alice, {"Command": "RegSub", "Topic": ["open/alice"], "SubName": name})
    assert pscr["Completion"] == "ok", pscr
    bob = connect_as("bob")
    pscr = command(bob, {"Command": "RegSub", "Topic": ["open/bob"], "SubName": name})
    (subscription,) = list_subs(alice, SubName=name)
    assert (subscription["QName"], subscription["Topic"]) == (alice.client_id, "open/alice"), (
        f"bob re-pointed alice's subscription: {subscription}"
    )
    assert pscr["Completion"] == "error" and reasons(pscr)[0] in (3078, 3151), pscr


def test_another_user_cannot_remove_a_named_subscription(connect_as: Connect) -> None:
    alice = connect_as("alice")
    name = unique("alice-keep-")
    assert (
        command(alice, {"Command": "RegSub", "Topic": ["open/k"], "SubName": name})["Completion"]
        == "ok"
    )
    bob = connect_as("bob")
    pscr = command(bob, {"Command": "DeregSub", "SubName": name})
    assert (pscr["Completion"], reasons(pscr)) == ("error", [3151]), pscr
    assert len(list_subs(alice, SubName=name)) == 1


# -- command topics -------------------------------------------------------------------------


def test_reg_sub_for_an_unreadable_topic_is_not_authorized(connect_as: Connect) -> None:
    bob = connect_as("bob")
    pscr = command(bob, {"Command": "RegSub", "Topic": ["secret/x"]})
    assert (pscr["Completion"], reasons(pscr)) == ("warning", [NOT_AUTHORIZED]), pscr
    assert pscr["Response"][0]["Topic"] == "secret/x"


def test_publish_command_to_a_denied_topic_is_dropped(connect_as: Connect) -> None:
    alice = connect_as("alice")
    assert alice.subscribe("secret/#", 1) == [1]
    bob = connect_as("bob")
    pscr = command(
        bob,
        {"Command": "Publish", "Topic": ["secret/cmd", f"{RESPONSE}{alice.client_id}"]},
        body="forged",
    )
    assert (pscr["Completion"], reasons(pscr)) == ("warning", [NOT_AUTHORIZED] * 2), pscr
    sync(alice, bob)
    assert [m.topic for m in alice.received() if not m.topic.startswith("open/")] == []


def test_forged_replies_never_reach_another_client(connect_as: Connect) -> None:
    alice = connect_as("alice")
    alice_replies = RESPONSE + alice.client_id
    assert alice.subscribe(alice_replies, 1) == [1]
    mallory = connect_as("mallory")
    mallory.publish(alice_replies, b'{"pscr": {"Completion": "ok"}}', qos=1)
    bob = connect_as("bob")
    # A command of bob's whose reply would go to alice's response topic.
    bob.publish(
        CONTROL_QUEUE,
        json.dumps(
            {"mqmd": {"ReplyToQ": alice_replies}, "psc": {"Command": "RegSub", "Topic": ["x/+"]}}
        ),
        qos=1,
    )
    # Alice's own command: its reply comes after anything routed to her before.
    pscr = command(alice, {"Command": "ListSubs", "QName": unique("none")})
    assert pscr["Completion"] == "ok"
    assert len(alice.received(alice_replies)) == 1


def test_listsubs_shows_only_the_callers_subscriptions(connect_as: Connect) -> None:
    """Each user sees the subscriptions it registered and those on its queues; an admin
    (alice) sees every user's."""
    bob = connect_as("bob")
    topic = unique("open/listed-")
    pscr = command(bob, {"Command": "RegSub", "Topic": [topic], "RegOpt": ["NewPubsOnly"]})
    assert pscr["Completion"] == "ok", pscr
    carol = connect_as("carol")
    assert list_subs(carol, QName=bob.client_id) == []
    assert topic not in [s["Topic"] for s in list_subs(carol)]
    assert [s["Topic"] for s in list_subs(bob, QName=bob.client_id)] == [topic]
    assert [s["Topic"] for s in list_subs(connect_as("alice"), QName=bob.client_id)] == [topic]


def test_regsub_for_another_users_queue_needs_a_grant_and_the_owners_permission(
    connect_as: Connect,
) -> None:
    """A CorrelAsId identity of bob's own on carol's queue is refused (3081) unless a `queue`
    rule grants bob that queue; even then only topics carol may read are registered."""
    carol = connect_as("carol", unique("carol-q"), clean=False)
    assert carol.subscribe("open/carol", 1) == [1]
    bob = connect_as("bob")
    psc = {"Command": "RegSub", "QName": carol.client_id, "RegOpt": ["CorrelAsId"]}
    pscr = command(bob, {**psc, "Topic": ["open/from-bob"]})
    assert (pscr["Completion"], reasons(pscr)) == ("error", [NOT_AUTHORIZED]), pscr
    assert "another user" in pscr.get("Detail", "")
    inbox = connect_as("carol", SHARED_INBOX, clean=False)
    granted = {**psc, "QName": SHARED_INBOX, "Topic": ["open/granted", "bobonly/x"]}
    pscr = command(bob, granted)
    assert (pscr["Completion"], reasons(pscr)) == ("warning", [NOT_AUTHORIZED]), pscr
    assert [r["Topic"] for r in pscr["Response"]] == ["bobonly/x"]
    alice = connect_as("alice")
    listed = [(s["Topic"], s["UserId"]) for s in list_subs(alice, QName=SHARED_INBOX)]
    assert listed == [("open/granted", "bob")]
    bob.publish("bobonly/x", b"not for carol", qos=1)
    bob.publish("open/granted", b"for carol", qos=1)
    bob.publish("open/from-bob", b"nothing registered", qos=1)
    assert [m.payload for m in inbox.wait_messages(1, topic="open/granted")] == [b"for carol"]
    sync(inbox, bob)
    sync(carol, bob)
    assert inbox.received("bobonly/x") == []
    assert carol.received("open/from-bob") == []


def test_a_user_without_the_command_permission_changes_nothing(connect_as: Connect) -> None:
    mallory = connect_as("mallory")
    pscr = command(mallory, {"Command": "RegSub", "Topic": ["open/m"]})
    assert (pscr["Completion"], reasons(pscr)) == ("error", [NOT_AUTHORIZED]), pscr
    alice = connect_as("alice")
    assert list_subs(alice, QName=mallory.client_id) == []


DENIED = "$SYS/broker/publish/messages/denied"


def test_a_will_is_checked_like_any_publication(broker: Broker, connect_as: Connect) -> None:
    """docs/security.md: a publication the client may not make is dropped, not delivered, not
    retained. A will is a publication made on the client's behalf."""
    alice = connect_as("alice")
    alice_replies = RESPONSE + alice.client_id
    assert alice.subscribe([("secret/#", 1), (alice_replies, 1)]) == [1, 1]
    denied = connect_as("alice")
    assert denied.subscribe(DENIED, 0) == [0]
    before = int(denied.wait_messages(1, topic=DENIED)[-1].payload)  # the retained value
    for topic, retain in [("secret/will", True), (alice_replies, False)]:
        raw = RawClient(broker.port)
        ack = raw.connect(
            unique("mwill"),
            username="mallory",
            password=PASSWORDS["mallory"].encode(),
            will=Will(topic, b"forged by a will", 1, retain),
        )
        assert ack.return_code == 0
        raw.close()  # no DISCONNECT: the will is due
    # Both wills were judged (and denied) once $SYS counts them.
    assert wait_until(
        lambda: any(int(m.payload) >= before + 2 for m in denied.received(DENIED)), 10.0
    ), denied.received(DENIED)
    bob = connect_as("bob")
    sync(alice, bob)
    forged = [m.topic for m in alice.received() if m.payload == b"forged by a will"]
    late = connect_as("alice")
    assert late.subscribe("secret/will", 1) == [1]
    sync(late, bob)
    assert forged == [], "wills were delivered on topics mallory may not publish to"
    assert late.received("secret/will") == [], "a will replaced a retained message"


# -- sessions belong to their users ------------------------------------------------------------


def _connack(broker: Broker, client_id: str, user: str | None, clean: bool = False) -> int:
    """The CONNACK return code a user gets for this client id (the connection then closes)."""
    raw = RawClient(broker.port)
    try:
        password = None if user is None else PASSWORDS[user].encode()
        return raw.connect(client_id, clean=clean, username=user, password=password).return_code
    finally:
        raw.close()


def test_another_users_client_id_is_refused_and_the_session_kept(
    broker: Broker, connect_as: Connect
) -> None:
    """docs/security.md "Sessions belong to their users": neither resuming (clean 0) nor
    starting afresh (clean 1) under alice's client id reaches her session."""
    client_id = unique("alice-dev")
    owner = connect_as("alice", client_id, clean=False)
    assert owner.subscribe([("secret/session", 1), ("open/session", 1)]) == [1, 1]
    owner.disconnect()
    publisher = connect_as("alice")
    publisher.publish("secret/session", b"queued while offline", qos=1)
    for user, clean in [("bob", False), ("bob", True), (None, False), (None, True)]:
        assert _connack(broker, client_id, user, clean) == NOT_AUTHORIZED_CONNACK, (user, clean)
    publisher.publish("open/session", b"still queued", qos=1)
    back = connect_as("alice", client_id, clean=False)
    got = back.wait_messages(2, topic=None)
    assert [(m.topic, m.payload) for m in got[:2]] == [
        ("secret/session", b"queued while offline"),
        ("open/session", b"still queued"),
    ]


def test_messages_in_flight_stay_with_their_user(broker: Broker, connect_as: Connect) -> None:
    """A QoS 1 message sent to alice but not acknowledged is re-sent (DUP=1) to alice when she
    resumes, never to another user who asks for her client id."""
    client_id = unique("alice-inflight")
    owner = RawClient(broker.port)
    try:
        ack = owner.connect(
            client_id, clean=False, username="alice", password=PASSWORDS["alice"].encode()
        )
        assert ack.return_code == 0
        assert owner.subscribe([("secret/inflight", 1)]) == [1]
        connect_as("alice").publish("secret/inflight", b"unacknowledged", qos=1)
        assert owner.collect(1, ack=False)[0].payload == b"unacknowledged"
    finally:
        owner.close()  # no PUBACK: the message stays in flight in the session
    assert _connack(broker, client_id, "bob") == NOT_AUTHORIZED_CONNACK
    back = RawClient(broker.port)
    try:
        ack = back.connect(
            client_id, clean=False, username="alice", password=PASSWORDS["alice"].encode()
        )
        assert (ack.session_present, ack.return_code) == (1, 0)
        (again,) = back.collect(1)
        assert (again.payload, again.dup) == (b"unacknowledged", True)
    finally:
        back.close()


def test_another_user_cannot_take_over_a_connected_session(
    broker: Broker, connect_as: Connect
) -> None:
    client_id = unique("alice-live")
    owner = connect_as("alice", client_id, clean=False)
    assert owner.subscribe("devices/+/secret", 1) == [1]
    assert _connack(broker, client_id, "bob") == NOT_AUTHORIZED_CONNACK
    publisher = connect_as("alice")
    publisher.publish("devices/x/secret", b"mine", qos=1)
    assert [m.payload for m in owner.wait_messages(1, topic="devices/x/secret")] == [b"mine"]
    assert owner.disconnects == 0


def test_an_mq_queue_belongs_to_the_user_whose_regsub_made_it(
    broker: Broker, connect_as: Connect
) -> None:
    """A RegSub creates a durable queue (a session nobody has connected as yet) owned by the
    registering user: another client claiming that client id is refused; alice reads it."""
    alice = connect_as("alice")
    queue = unique("reports")
    pscr = command(alice, {"Command": "RegSub", "Topic": ["secret/reports"], "QName": queue})
    assert pscr["Completion"] == "ok", pscr
    alice.publish("secret/reports", b"queued for the reports queue", qos=1)
    assert _connack(broker, queue, None) == NOT_AUTHORIZED_CONNACK
    assert _connack(broker, queue, "bob") == NOT_AUTHORIZED_CONNACK
    assert [s["Topic"] for s in list_subs(alice, QName=queue)] == ["secret/reports"]
    reader = connect_as("alice", queue, clean=False)
    got = reader.wait_messages(1, topic="secret/reports")
    assert [m.payload for m in got] == [b"queued for the reports queue"]


# -- resource limits ------------------------------------------------------------------------


def test_an_oversized_command_gets_3097_and_the_broker_carries_on(connect_as: Connect) -> None:
    bob = connect_as("bob")
    filler = "x" * (1024 * 1024 + 10)
    payload = json.dumps({"psc": {"Command": "RegSub", "Topic": ["open/big"]}, "body": filler})
    pscr = command(bob, {"Command": "RegSub"}, raw=payload.encode())
    assert (pscr["Completion"], reasons(pscr)) == ("error", [3097]), str(pscr)[:300]
    assert "exceeds the limit" in pscr.get("Detail", "")
    still_serving(connect_as)


def test_a_filter_longer_or_deeper_than_the_limit_gets_3150(connect_as: Connect) -> None:
    bob = connect_as("bob")
    long_filter = "a = '" + "x" * 70_000 + "'"
    pscr = command(bob, {"Command": "RegSub", "Topic": ["open/f"], "Filter": long_filter})
    assert (pscr["Completion"], reasons(pscr)) == ("error", [3150])
    deep_filter = "(" * 100 + "a = 1" + ")" * 100
    pscr = command(bob, {"Command": "RegSub", "Topic": ["open/f"], "Filter": deep_filter})
    assert (pscr["Completion"], reasons(pscr)) == ("error", [3150])
    position = int(pscr["Response"][0]["Position"])
    assert 0 <= position < len(deep_filter)
    assert "deeper than 64" in pscr.get("Detail", "")
    alice = connect_as("alice")
    assert list_subs(alice, QName=bob.client_id) == []
    still_serving(connect_as)


def test_an_oversized_packet_closes_only_its_connection(
    broker: Broker, connect_as: Connect
) -> None:
    bystander = connect_as("bob")
    raw = RawClient(broker.port)
    try:
        assert raw.connect(unique("big")).return_code == 0
        header = publish_packet("open/big", b"")[:1]
        # Declares 3 MiB: refused from the fixed header, before the body is sent.
        raw.send(header + bytes([0x80, 0x80, 0xC0, 0x01]) + b"\x00\x08open/big")
        assert raw.wait_closed(10.0)
    finally:
        raw.close()
    topic = unique("open/after/")
    bystander.subscribe(topic, 1)
    bystander.publish(topic, b"fine", qos=1)
    assert bystander.wait_messages(1, topic=topic)[0].payload == b"fine"


def test_adversarial_topic_depths_are_served(connect_as: Connect) -> None:
    """Deep filters and topics up to the level limit (200): correct answers, and the broker
    keeps up; beyond it, refused (test_34_topic_limits.py)."""
    alice = connect_as("alice")
    deep = "+/" * 150 + "#"
    bob = connect_as("bob")
    assert bob.subscribe(deep, 1) == [FAILURE]  # no rule covers it
    too_deep = "+/" * 3000 + "#"
    assert alice.subscribe([(deep, 1), ("/".join(["+"] * 200), 1), (too_deep, 1)]) == [
        1,
        1,
        FAILURE,
    ]
    topic = "open/" + "/".join(["a"] * 199)
    alice.publish(topic, b"deep", qos=1)
    sync(alice, alice)
    # Both filters match; one copy per session (the higher QoS).
    assert [m.payload for m in alice.received(topic)] == [b"deep"]
    still_serving(connect_as)
