"""The MQ command handlers (`commands.execute`) against a fake host: no broker, no sockets.

The host records what the handlers ask of the broker (queues, subscription changes,
retained sends, publications, Puts), so each command's effects and reply are checked
exactly, as a broker would see them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from telemq.commands import (
    CONTROL_QUEUE,
    DEFAULT_STREAM,
    PutResult,
    Reply,
    Requester,
    execute,
    parse_command,
)
from telemq.protocol import TopicLimits
from telemq.subscriptions import Registry, Subscription

ME = Requester("app1", "alice", "", 1)


@dataclass
class FakeHost:
    """`commands.Host`, recording every call."""

    qmgr_name: str = "QM.FAKE"
    topic_limits: TopicLimits = field(default_factory=lambda: TopicLimits(8, 64))
    max_filter_size: int = 16
    max_filter_size_per_user: int = 40
    retained: dict[tuple[str, str], bytes] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)  # queue -> owner
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    denied_topics: set[str] = field(default_factory=set)
    denied_to: dict[str, set[str]] = field(default_factory=dict)  # user -> filters
    sub_points: set[str] = field(default_factory=lambda: {""})
    admins: set[str] = field(default_factory=set)
    queue_grants: set[tuple[str, str]] = field(default_factory=set)  # (user, queue)
    network: set[str] = field(default_factory=set)  # the other brokers it reaches

    def now(self) -> float:
        return 1_000_000.0

    def broker_known(self, name: str) -> bool:
        return name in self.network

    def proxies_asked(self) -> list[tuple[str, str, str, int]]:
        return []

    def sub_point_declared(self, name: str) -> bool:
        return name in self.sub_points

    def may_subscribe(self, requester: Requester, topic_filter: str) -> bool:
        denied = self.denied_to.get(requester.user_id, set())
        return topic_filter not in self.denied_topics and topic_filter not in denied

    def may_publish(self, requester: Requester, topic: str) -> bool:
        return topic not in self.denied_topics

    def ensure_queue(self, queue: str, owner: str) -> None:
        self.queues.setdefault(queue, owner)
        self.calls.append(("ensure_queue", queue))

    def queue_owner(self, queue: str) -> str | None:
        return self.queues.get(queue)

    def may_use_queue(self, requester: Requester, queue: str) -> bool:
        return requester.user_id in self.admins or (requester.user_id, queue) in self.queue_grants

    def is_admin(self, requester: Requester) -> bool:
        return requester.user_id in self.admins

    def reserve_subscriptions(self, queue: str, count: int) -> str | None:
        return None  # the quota is the broker's (tests/broker/test_35_quotas.py)

    def subscription_changed(self, subscription: Subscription) -> None:
        self.calls.append(("changed", subscription.queue, subscription.topic))

    def subscription_removed(self, subscription: Subscription) -> None:
        self.calls.append(("removed", subscription.queue, subscription.topic))

    def send_retained(self, subscription: Subscription) -> int:
        sent = [t for (point, t) in self.retained if point == subscription.sub_point]
        matching = [t for t in sent if t == subscription.topic]
        self.calls.append(("send_retained", subscription.queue, subscription.topic))
        return len(matching)

    def publish(
        self,
        requester: Requester,
        topic: str,
        body: bytes,
        retain: bool,
        exclude_queue: str | None,
        expiry: float | None = None,
        local: bool = False,
    ) -> None:
        self.calls.append(("publish", topic, body, retain, exclude_queue, expiry))
        if retain:
            self.retained[(requester.sub_point, topic)] = body

    def retained_topics(self, sub_point: str, topic_filter: str) -> list[str]:
        return [t for (point, t) in self.retained if point == sub_point and t == topic_filter]

    def delete_retained(self, sub_point: str, topic: str, local: bool = False) -> bool:
        self.calls.append(("delete_retained", sub_point, topic))
        return self.retained.pop((sub_point, topic), None) is not None

    def put_to_queue(
        self, requester: Requester, queue: str, topic: str, body: bytes, qos: int
    ) -> PutResult:
        self.calls.append(("put", queue, topic, body, qos))
        return PutResult.PUT if queue in self.queues else PutResult.NO_QUEUE


def run(
    host: FakeHost, registry: Registry, psc: dict[str, Any], body: str = "", queue: str = ""
) -> Reply:
    message: dict[str, Any] = {"psc": psc}
    if body:
        message["body"] = body
    command = parse_command(json.dumps(message).encode())
    topic = queue or (
        DEFAULT_STREAM if psc["Command"] in ("Publish", "DeletePub") else CONTROL_QUEUE
    )
    return execute(command, topic, ME, registry, host)


def codes(reply: Reply) -> list[int]:
    return [reason.code for reason in reply.reasons]


def test_regsub_creates_the_queue_registers_and_sends_retained() -> None:
    host, registry = FakeHost(), Registry()
    host.retained[("", "scores/a")] = b"1-0"
    reply = run(host, registry, {"Command": "RegSub", "Topic": ["scores/a"], "QName": "q1"})
    assert reply.completion == "ok", reply
    assert host.calls == [
        ("ensure_queue", "q1"),
        ("changed", "q1", "scores/a"),
        ("send_retained", "q1", "scores/a"),
    ]
    (subscription,) = registry.of_queue("q1")
    assert (subscription.identity.qmgr, subscription.owner) == ("QM.FAKE", "alice")


def test_a_queue_on_another_broker_of_the_network_waits_in_its_remote_session() -> None:
    """QMgrName of a broker the network reaches: the identity names it, the deliveries go to
    `$remote/<broker>/<queue>` here (docs/network.md §7), and it is kept as such."""
    host, registry = FakeHost(network={"QM.FAR"}), Registry()
    psc = {"Command": "RegSub", "Topic": ["a"], "QMgrName": "QM.FAR", "QName": "q1"}
    assert run(host, registry, psc).completion == "ok"
    assert host.calls[0] == ("ensure_queue", "$remote/QM.FAR/q1")
    (subscription,) = registry.of_queue("$remote/QM.FAR/q1")
    assert (subscription.identity.qmgr, subscription.identity.queue) == ("QM.FAR", "q1")
    assert Subscription.from_data(subscription.to_data()).queue == "$remote/QM.FAR/q1"
    assert registry.of_queue("q1") == []
    listed = run(host, registry, {"Command": "ListSubs"}).subscriptions
    assert [(s["QMgrName"], s["QName"]) for s in listed] == [(["QM.FAR"], ["q1"])]
    host.calls.clear()
    psc["Command"] = "DeregSub"
    assert run(host, registry, psc).completion == "ok"
    assert host.calls == [("removed", "$remote/QM.FAR/q1", "a")]
    # Still 3074 for a name the network does not know.
    psc = {"Command": "RegSub", "Topic": ["a"], "QMgrName": "QM.NONE", "QName": "q1"}
    assert codes(run(host, registry, psc)) == [3074]


def test_deregsub_removes_and_reports_what_was_not_registered() -> None:
    host, registry = FakeHost(), Registry()
    run(host, registry, {"Command": "RegSub", "Topic": ["a"], "QName": "q1"})
    host.calls.clear()
    reply = run(host, registry, {"Command": "DeregSub", "Topic": ["a", "b"], "QName": "q1"})
    assert (reply.completion, codes(reply)) == ("warning", [3073])
    assert host.calls == [("removed", "q1", "a")]
    assert registry.of_queue("q1") == []


def test_deregall_without_a_topic_removes_every_correl_ids_registrations() -> None:
    host, registry = FakeHost(), Registry()
    for correl in ("0A", "0B"):
        message = {
            "mqmd": {"CorrelId": correl},
            "psc": {
                "Command": "RegSub",
                "Topic": [f"t/{correl}"],
                "QName": "q",
                "RegOpt": ["CorrelAsId"],
            },
        }
        command = parse_command(json.dumps(message).encode())
        assert execute(command, CONTROL_QUEUE, ME, registry, host).completion == "ok"
    run(host, registry, {"Command": "RegSub", "Topic": ["t/none"], "QName": "q"})
    reply = run(host, registry, {"Command": "DeregSub", "QName": "q", "RegOpt": ["DeregAll"]})
    assert reply.completion == "ok", reply
    assert registry.of_queue("q") == []


def test_requpdate_with_nothing_retained_fails_with_3077() -> None:
    host, registry = FakeHost(), Registry()
    psc = {"Command": "RegSub", "Topic": ["r"], "QName": "q", "RegOpt": ["PubOnReqOnly"]}
    run(host, registry, psc)
    reply = run(host, registry, {"Command": "ReqUpdate", "Topic": ["r"], "QName": "q"})
    assert (reply.completion, codes(reply)) == ("error", [3077])
    host.retained[("", "r")] = b"kept"
    reply = run(host, registry, {"Command": "ReqUpdate", "Topic": ["r"], "QName": "q"})
    assert reply.completion == "ok", reply


def test_a_second_name_for_a_named_subscription_is_3152() -> None:
    host, registry = FakeHost(), Registry()
    psc = {"Command": "RegSub", "Topic": ["n"], "QName": "q"}
    assert run(host, registry, {**psc, "SubName": "A"}).completion == "ok"
    reply = run(host, registry, {**psc, "SubName": "B", "RegOpt": ["AddName"]})
    assert (reply.completion, codes(reply)) == ("error", [3152])


def test_publish_and_deletepub_go_through_the_host() -> None:
    host, registry = FakeHost(), Registry()
    psc = {"Command": "Publish", "Topic": ["p/x"], "PubOpt": ["RetainPub"]}
    assert run(host, registry, psc, body="hello").completion == "ok"
    assert host.calls[-1][:4] == ("publish", "p/x", b"hello", True)
    assert run(host, registry, {"Command": "DeletePub", "Topic": ["p/x"]}).completion == "ok"
    assert host.calls[-1] == ("delete_retained", "", "p/x")
    assert host.retained == {}


def test_a_command_on_the_wrong_queue_or_unknown_is_refused() -> None:
    host, registry = FakeHost(), Registry()
    reply = run(host, registry, {"Command": "RegSub", "Topic": ["a"]}, queue=DEFAULT_STREAM)
    assert reply.completion == "error" and codes(reply) != []
    reply = run(host, registry, {"Command": "Frobnicate"})
    assert (reply.completion, codes(reply)) == ("error", [3097])
    assert host.calls == []


@pytest.mark.parametrize("denied", ["secret/#"])
def test_an_unauthorized_filter_changes_nothing(denied: str) -> None:
    host, registry = FakeHost(denied_topics={denied}), Registry()
    reply = run(host, registry, {"Command": "RegSub", "Topic": [denied], "QName": "q"})
    assert (reply.completion, codes(reply)) == ("warning", [3081])  # per topic (mq-reference)
    assert len(registry) == 0
    assert ("changed", "q", denied) not in host.calls


BOB = Requester("bob-app", "bob", "", 1)


def run_as(
    host: FakeHost, registry: Registry, requester: Requester, psc: dict[str, Any], correl: str = ""
) -> Reply:
    message: dict[str, Any] = {"psc": psc}
    if correl:
        message["mqmd"] = {"CorrelId": correl}
    command = parse_command(json.dumps(message).encode())
    return execute(command, CONTROL_QUEUE, requester, registry, host)


def test_regsub_for_another_users_queue_is_3081_and_changes_nothing() -> None:
    host, registry = FakeHost(), Registry()
    assert run(host, registry, {"Command": "RegSub", "Topic": ["a"], "QName": "q"}).completion == (
        "ok"
    )
    host.calls.clear()
    # A CorrelId of its own makes a new identity on the queue: the queue is still alice's.
    psc = {"Command": "RegSub", "Topic": ["b"], "QName": "q", "RegOpt": ["CorrelAsId"]}
    reply = run_as(host, registry, BOB, psc, correl="0B")
    assert (reply.completion, codes(reply)) == ("error", [3081]), reply
    assert "another user" in reply.message
    assert host.calls == []
    assert [s.topic for s in registry.of_queue("q")] == ["a"]


def test_a_queue_grant_registers_only_what_the_queue_owner_may_read() -> None:
    host, registry = FakeHost(denied_to={"alice": {"secret/#"}}), Registry()
    host.queues["q"] = "alice"
    host.queue_grants.add(("bob", "q"))
    psc = {"Command": "RegSub", "Topic": ["news", "secret/#"], "QName": "q"}
    reply = run_as(host, registry, BOB, psc)
    assert (reply.completion, codes(reply)) == ("warning", [3081]), reply
    assert [(s.topic, s.owner) for s in registry.of_queue("q")] == [("news", "bob")]
    assert host.queues["q"] == "alice"


def test_an_admin_registers_for_any_queue() -> None:
    host, registry = FakeHost(admins={"bob"}), Registry()
    host.queues["q"] = "alice"
    reply = run_as(host, registry, BOB, {"Command": "RegSub", "Topic": ["n"], "QName": "q"})
    assert reply.completion == "ok", reply


def test_put_to_another_users_queue_needs_a_grant() -> None:
    host, registry = FakeHost(), Registry()
    host.queues["q"] = "alice"
    psc = {"Command": "Put", "Topic": ["t"], "QName": "q"}
    reply = run_as(host, registry, BOB, psc)
    assert (reply.completion, codes(reply)) == ("error", [3081]), reply
    host.queue_grants.add(("bob", "q"))
    assert run_as(host, registry, BOB, psc).completion == "ok"
    host.denied_to["alice"] = {"t"}
    assert codes(run_as(host, registry, BOB, psc)) == [3081]


def test_listsubs_shows_the_callers_subscriptions_and_queues_or_all_to_an_admin() -> None:
    host, registry = FakeHost(admins={"root"}), Registry()
    run(host, registry, {"Command": "RegSub", "Topic": ["alice/1"], "QName": "qa"})
    run_as(host, registry, BOB, {"Command": "RegSub", "Topic": ["bob/1"], "QName": "qb"})
    host.queue_grants.add(("bob", "qa"))
    psc = {"Command": "RegSub", "Topic": ["bob/2"], "QName": "qa", "RegOpt": ["CorrelAsId"]}
    assert run_as(host, registry, BOB, psc, correl="0B").completion == "ok"

    def listed(requester: Requester) -> list[str]:
        reply = run_as(host, registry, requester, {"Command": "ListSubs"})
        assert reply.completion == "ok", reply
        return sorted(s["Topic"][0] for s in reply.subscriptions)

    assert listed(ME) == ["alice/1", "bob/2"]  # alice's own, and bob's on her queue
    assert listed(BOB) == ["bob/1", "bob/2"]
    assert listed(Requester("eve-app", "eve", "")) == []
    assert listed(Requester("root-app", "root", "")) == ["alice/1", "bob/1", "bob/2"]


@pytest.mark.parametrize(
    "psc",
    [
        {"Command": "RegSub", "Topic": ["a/b/c/d/e/f/g/h/i"]},
        {"Command": "RegSub", "Topic": ["x" * 65]},
        {"Command": "DeregSub", "Topic": ["a/+/c/d/e/f/g/h/#"]},
        {"Command": "ReqUpdate", "Topic": ["a/b/c/d/e/f/g/h/i"]},
        {"Command": "Publish", "Topic": ["a/b/c/d/e/f/g/h/i"]},
        {"Command": "DeletePub", "Topic": ["y" * 65]},
        {"Command": "Put", "Topic": ["a/b/c/d/e/f/g/h/i"]},
    ],
)
def test_a_topic_beyond_the_limits_is_3072_and_changes_nothing(psc: dict[str, Any]) -> None:
    host, registry = FakeHost(), Registry()
    reply = run(host, registry, psc)
    assert (reply.completion, codes(reply)) == ("error", [3072]), reply
    assert "levels (limit 8)" in reply.message or "bytes long (limit 64)" in reply.message
    assert host.calls == [] and len(registry) == 0


def test_a_filter_beyond_its_node_budget_is_3150_naming_the_limit() -> None:
    host, registry = FakeHost(), Registry()
    small = " OR ".join(f"n = {i}" for i in range(5))  # an OR of 5 comparisons: size 16
    reply = run(host, registry, {"Command": "RegSub", "Topic": ["a"], "Filter": small})
    assert reply.completion == "ok", reply
    bigger = " OR ".join(f"n = {i}" for i in range(6))  # size 19
    reply = run(host, registry, {"Command": "RegSub", "Topic": ["b"], "Filter": bigger})
    assert (reply.completion, codes(reply)) == ("error", [3150]), reply
    assert "size is 19, more than the limit of 16 (limits.max_filter_size)" in reply.message
    # Addressing it is never refused for its size (DeregSub of a filter from before a limit).
    reply = run(host, registry, {"Command": "DeregSub", "Topic": ["b"], "Filter": bigger})
    assert codes(reply) == [3073]  # not registered, rather than 3150


def test_a_users_filters_share_one_budget() -> None:
    host, registry = FakeHost(), Registry()
    ten = " OR ".join(f"n = {i}" for i in range(3))  # size 10
    for n in range(4):
        psc = {"Command": "RegSub", "Topic": [f"t/{n}"], "Filter": ten}
        assert run(host, registry, psc).completion == "ok"
    reply = run(host, registry, {"Command": "RegSub", "Topic": ["t/4"], "Filter": ten})
    assert (reply.completion, codes(reply)) == ("error", [3150]), reply
    assert "max_filter_size_per_user" in reply.message
    # Another user has a budget of its own.
    reply = run_as(host, registry, BOB, {"Command": "RegSub", "Topic": ["t/4"], "Filter": ten})
    assert reply.completion == "ok", reply
