"""Authorization and identity ownership (design §6 "Authorization", mq-reference §1.4, §2.1-2.5,
docs/security.md): the command permission, partial authorization warnings (3081), identities
owned by a user (3078, 3151), VariableUserId, denied MQTT publications and subscriptions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import ClientFactory, start_broker
from .helpers import (
    CONTROL_QUEUE,
    BrokerProcess,
    MQClient,
    assert_error,
    assert_ok,
    assert_warning,
    build_command,
    unique,
    users_and_acl,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "mallory": "mallory-pw"}

ACL = [
    # mallory may not put commands; everyone else may.
    ("mallory", "command", "#", False),
    ("*", "command", "#", True),
    # The identity tests share queues between users: each may use the others' queues
    # (queues without this grant: tests/security/test_users_apart.py).
    ("*", "queue", "#", True),
    ("*", "subscribe", "SYSTEM.BROKER.RESPONSE/%c", True),
    ("*", "all", "sentinel/#", True),
    ("*", "all", "open/#", True),
    ("bob", "subscribe", "secret/#", True),
    ("alice", "publish", "alice/#", True),
    ("*", "subscribe", "alice/#", True),
]


def _config() -> str:
    lines = ['name = "QM.AUTH"', "allow_anonymous = false", "", "[sys]", "interval = 0", ""]
    return "\n".join(lines) + users_and_acl(PASSWORDS, ACL)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory, _config())
    yield process
    process.finalize()


def _as(clients: ClientFactory, broker: BrokerProcess, user: str, **kwargs: object) -> MQClient:
    return clients(broker.port, username=user, password=PASSWORDS[user], **kwargs)


def test_commands_need_the_command_permission(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    mallory = _as(clients, broker, "mallory")
    alice = _as(clients, broker, "alice")
    queue = unique("q")
    reply = mallory.command(
        {"Command": "RegSub", "Topic": unique("open/m/"), "QName": queue}, form=form
    )
    assert_error(reply, 3081)
    assert alice.list_subs(QName=queue) == [], "nothing was registered"
    watcher = _as(clients, broker, "bob")
    topic = unique("open/m/")
    watcher.subscribe(topic, 1)
    reply = mallory.command({"Command": "Publish", "Topic": topic}, form=form, body=b"x")
    assert_error(reply, 3081)
    watcher.sync(mallory)
    assert watcher.deliveries(topic) == []
    # The command permission is not publish permission: a plain PUBLISH is allowed by open/#.
    mallory.publish(topic, b"plain", qos=1)
    assert [m.payload for m in watcher.wait_deliveries(1, topic)] == [b"plain"]


def test_reg_sub_registers_only_permitted_topics(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    alice = _as(clients, broker, "alice")
    permitted = unique("open/ok/")
    refused = unique("secret/no/")
    reply = alice.command({"Command": "RegSub", "Topic": [permitted, refused]}, form=form)
    responses = assert_warning(reply, 3081)
    assert responses[0].get("Topic") == refused
    assert reply.echo is not None and reply.echo.get("Topic") == [permitted, refused]
    listed = alice.list_subs(QName=alice.client_id)
    topics = [s["Topic"][0] for s in listed]
    assert permitted in topics and refused not in topics
    bob = _as(clients, broker, "bob")
    bob.publish(permitted, b"delivered", qos=1)
    bob.publish(refused, b"never", qos=1)
    assert [m.payload for m in alice.wait_deliveries(1, permitted)] == [b"delivered"]
    alice.sync(bob)
    assert alice.deliveries(refused) == []


def test_reg_sub_with_several_refused_topics_lists_each(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    alice = _as(clients, broker, "alice")
    refused = [unique("secret/a/"), unique("secret/b/")]
    reply = alice.command({"Command": "RegSub", "Topic": [unique("open/"), *refused]}, form=form)
    responses = assert_warning(reply, 3081, 3081)
    assert sorted(str(r.get("Topic")) for r in responses) == sorted(refused)


def test_publish_command_partial_authorization(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    bob = _as(clients, broker, "bob")
    mine = unique("alice/p/")
    theirs = unique("secret/p/")
    bob.subscribe([(mine, 1), (theirs, 1)])
    alice = _as(clients, broker, "alice")
    reply = alice.command({"Command": "Publish", "Topic": [mine, theirs]}, form=form, body=b"b")
    responses = assert_warning(reply, 3081)
    assert responses[0].get("Topic") == theirs
    assert [m.payload for m in bob.wait_deliveries(1, mine)] == [b"b"]
    bob.sync(alice)
    assert bob.deliveries(theirs) == []


def test_delete_pub_partial_authorization(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    alice = _as(clients, broker, "alice")
    hers = unique("alice/d/")
    common = unique("open/d/")
    alice.publish(hers, b"kept", qos=1, retain=True)
    alice.publish(common, b"deleted", qos=1, retain=True)
    bob = _as(clients, broker, "bob")
    reply = bob.command({"Command": "DeletePub", "Topic": [hers, common]}, form=form)
    responses = assert_warning(reply, 3081)
    assert responses[0].get("Topic") == hers
    probe = _as(clients, broker, "bob")
    probe.subscribe([(hers, 1), (common, 1)])
    probe.sync()
    assert [(m.topic, m.payload) for m in probe.deliveries() if m.retain] == [(hers, b"kept")]


def test_delete_pub_with_a_wildcard_checks_each_retained_topic(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """Wildcards are allowed in DeletePub (mq-reference 2.5): the retained publications on
    topics the user may publish to are deleted; if others matched, one warning 3081 names
    the filter."""
    alice = _as(clients, broker, "alice")
    leaf = unique("wild")
    hers, common = f"alice/{leaf}", f"open/{leaf}"
    alice.publish(hers, b"hers", qos=1, retain=True)
    alice.publish(common, b"common", qos=1, retain=True)
    bob = _as(clients, broker, "bob")
    responses = assert_warning(
        bob.command({"Command": "DeletePub", "Topic": f"+/{leaf}"}, form=form), 3081
    )
    assert responses[0].get("Topic") == f"+/{leaf}"
    probe = _as(clients, broker, "bob")
    probe.subscribe([(hers, 1), (common, 1)])
    probe.sync()
    assert [(m.topic, m.payload) for m in probe.deliveries() if m.retain] == [(hers, b"hers")]
    # alice may publish to both: everything matching goes, no warning.
    assert_ok(alice.command({"Command": "DeletePub", "Topic": f"+/{leaf}"}, form=form))
    late = _as(clients, broker, "bob")
    late.subscribe([(hers, 1), (common, 1)])
    late.sync()
    assert [m for m in late.deliveries() if m.retain] == []


def test_denied_mqtt_publish_is_never_delivered_nor_retained(
    broker: BrokerProcess, clients: ClientFactory
) -> None:
    bob = _as(clients, broker, "bob")
    topic = unique("secret/x/")
    bob.subscribe(topic, 1)
    alice = _as(clients, broker, "alice")
    alice.publish(topic, b"denied", qos=1)  # acknowledged all the same (MQTT 3.1.1)
    alice.publish(topic, b"denied and retained", qos=1, retain=True)
    alice.publish(topic, b"denied qos 0", qos=0)
    bob.sync(alice)
    assert bob.deliveries(topic) == []
    late = _as(clients, broker, "bob")
    late.subscribe(topic, 1)
    late.sync(alice)
    assert late.deliveries(topic) == []


def test_subscribe_to_a_refused_filter_gets_0x80(
    broker: BrokerProcess, clients: ClientFactory
) -> None:
    alice = _as(clients, broker, "alice")
    codes = alice.subscribe([("secret/#", 1), ("open/#", 1), ("#", 1), ("alice/+/x", 2)])
    assert codes == [0x80, 1, 0x80, 2]
    bob = _as(clients, broker, "bob")
    assert bob.subscribe([("secret/#", 1), (CONTROL_QUEUE, 1)]) == [1, 0x80]


def test_identity_of_another_user_is_3078(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    alice = _as(clients, broker, "alice")
    bob = _as(clients, broker, "bob")
    queue = unique("q")
    first = unique("open/id/")
    assert_ok(alice.command({"Command": "RegSub", "Topic": first, "QName": queue}, form=form))
    for topic in (first, unique("open/id/")):
        reply = bob.command({"Command": "RegSub", "Topic": topic, "QName": queue}, form=form)
        response = assert_error(reply, 3078)
        assert response.get("UserId") == "alice", "the owner is returned in the reply"
    listed = alice.list_subs(QName=queue)
    assert [(s["Topic"], s.get("UserId")) for s in listed] == [([first], ["alice"])]
    # With CorrelAsId it is another identity, free for bob.
    reply = bob.command(
        {"Command": "RegSub", "Topic": first, "QName": queue, "RegOpt": "CorrelAsId"},
        form=form,
        mqmd={"CorrelId": "0B0B"},
    )
    assert_ok(reply)


def test_wrong_user_on_dereg_sub_and_req_update_is_3151(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    alice = _as(clients, broker, "alice")
    bob = _as(clients, broker, "bob")
    queue = unique("q")
    topic = unique("open/wu/")
    alice.publish(topic, b"state", qos=1, retain=True)
    reply = alice.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "PubOnReqOnly"},
        form=form,
    )
    assert_ok(reply)
    target = {"Topic": topic, "QName": queue}
    assert_error(bob.command({"Command": "DeregSub", **target}, form=form), 3151)
    assert_error(bob.command({"Command": "ReqUpdate", **target}, form=form), 3151)
    assert len(alice.list_subs(QName=queue)) == 1
    assert_ok(alice.command({"Command": "ReqUpdate", **target}, form=form))
    assert_ok(alice.command({"Command": "DeregSub", **target}, form=form))
    assert alice.list_subs(QName=queue) == []


def _alices_variable_user_id_subscription(alice: MQClient, form: str) -> tuple[str, str]:
    """A PubOnReqOnly subscription of alice's with VariableUserId, its topic retained;
    returns (queue, topic)."""
    queue = unique("q")
    topic = unique("open/var/")
    alice.publish(topic, b"state", qos=1, retain=True)
    reply = alice.command(
        {
            "Command": "RegSub",
            "Topic": topic,
            "QName": queue,
            "RegOpt": ["VariableUserId", "PubOnReqOnly"],
        },
        form=form,
    )
    assert_ok(reply)
    return queue, topic


def test_variable_user_id_lets_other_users_address_the_subscription(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    alice = _as(clients, broker, "alice")
    bob = _as(clients, broker, "bob")
    queue, topic = _alices_variable_user_id_subscription(alice, form)
    target = {"Topic": topic, "QName": queue, "RegOpt": "VariableUserId"}
    # Another user may re-register (alter) it while keeping VariableUserId ...
    reply = bob.command(
        {
            "Command": "RegSub",
            "Topic": topic,
            "QName": queue,
            "RegOpt": ["VariableUserId", "PubOnReqOnly", "InformIfRet"],
        },
        form=form,
    )
    assert_ok(reply)
    # ... ask for an update ...
    assert_ok(bob.command({"Command": "ReqUpdate", **target}, form=form))
    # The queue stays alice's (her RegSub made it): she reads what bob's update sent.
    receiver = clients(
        broker.port, queue, clean=False, username="alice", password="alice-pw", connect=False
    )
    receiver.connect(replies=False)
    got = receiver.wait_deliveries(1, topic)
    assert [(m.payload, m.retain) for m in got] == [(b"state", True)]
    # ... and deregister it.
    assert_ok(bob.command({"Command": "DeregSub", **target}, form=form))
    assert alice.list_subs(QName=queue) == []


def test_another_user_addresses_a_variable_user_id_subscription_only_with_the_option(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """mq-reference 2.1, VariableUserId: "Must also be supplied on DeregSub/ReqUpdate for such
    subscriptions" (by another user: the owner addresses it either way)."""
    alice = _as(clients, broker, "alice")
    bob = _as(clients, broker, "bob")
    queue, topic = _alices_variable_user_id_subscription(alice, form)
    target = {"Topic": topic, "QName": queue}
    assert_error(bob.command({"Command": "ReqUpdate", **target}, form=form), 3151)
    assert_error(bob.command({"Command": "DeregSub", **target}, form=form), 3151)
    assert len(alice.list_subs(QName=queue)) == 1
    assert_ok(alice.command({"Command": "ReqUpdate", **target}, form=form))
    assert_ok(alice.command({"Command": "DeregSub", **target}, form=form))
    assert alice.list_subs(QName=queue) == []


def test_reg_sub_without_variable_user_id_fixes_the_owner(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    alice = _as(clients, broker, "alice")
    bob = _as(clients, broker, "bob")
    queue = unique("q")
    topic = unique("open/fix/")
    reply = alice.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "VariableUserId"},
        form=form,
    )
    assert_ok(reply)
    # bob re-registers it without VariableUserId: the option goes, bob's user id is fixed.
    reply = bob.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "InformIfRet"},
        form=form,
    )
    assert_ok(reply)
    listed = bob.list_subs(QName=queue)
    assert [s.get("UserId") for s in listed] == [["bob"]]
    assert "VariableUserId" not in listed[0]["RegOpt"]
    target = {"Command": "DeregSub", "Topic": topic, "QName": queue}
    assert_error(alice.command(target, form=form), 3151)
    assert_error(alice.command({**target, "RegOpt": "VariableUserId"}, form=form), 3151)
    assert_ok(bob.command(target, form=form))


def test_only_the_owner_may_add_variable_user_id(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    alice = _as(clients, broker, "alice")
    bob = _as(clients, broker, "bob")
    queue = unique("q")
    topic = unique("open/add/")
    assert_ok(alice.command({"Command": "RegSub", "Topic": topic, "QName": queue}, form=form))
    reply = bob.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "VariableUserId"},
        form=form,
    )
    assert reply.completion == "error" and reply.reasons[0] in (3078, 3151), str(reply)
    listed = alice.list_subs(QName=queue)
    assert [s.get("UserId") for s in listed] == [["alice"]]
    assert "VariableUserId" not in listed[0]["RegOpt"]
    reply = alice.command(
        {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "VariableUserId"},
        form=form,
    )
    assert_ok(reply)


def test_reply_to_q_needs_publish_permission(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """docs/security.md: the response goes to ReplyToQ only if the requester may publish there
    (else commands would let a client write into any topic)."""
    bob = _as(clients, broker, "bob")
    forbidden = unique("secret/replies/")
    bob.subscribe(forbidden, 1)
    alice = _as(clients, broker, "alice")
    alice.send(
        build_command(
            form,
            {"Command": "RegSub", "Topic": unique("open/r/"), "QName": unique("q")},
            {"ReplyToQ": forbidden},
        )
    )
    # A reply alice may publish is delivered, and comes after the first one would have.
    allowed = unique("alice/replies/")
    alice.subscribe(allowed, 1)
    reply = alice.command(
        {"Command": "RegSub", "Topic": unique("open/r/"), "QName": unique("q")},
        form=form,
        mqmd={"ReplyToQ": allowed},
    )
    assert_ok(reply)
    bob.sync(alice)
    written = [m.payload for m in bob.messages if m.topic == forbidden]
    assert written == [], "the broker wrote a reply into a topic the requester may not publish to"
