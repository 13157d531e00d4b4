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
from telemq.subscriptions import Registry, Subscription

ME = Requester("app1", "alice", "", 1)


@dataclass
class FakeHost:
    """`commands.Host`, recording every call."""

    qmgr_name: str = "QM.FAKE"
    retained: dict[tuple[str, str], bytes] = field(default_factory=dict)
    queues: set[str] = field(default_factory=set)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    denied_topics: set[str] = field(default_factory=set)
    sub_points: set[str] = field(default_factory=lambda: {""})

    def now(self) -> float:
        return 1_000_000.0

    def sub_point_declared(self, name: str) -> bool:
        return name in self.sub_points

    def may_subscribe(self, requester: Requester, topic_filter: str) -> bool:
        return topic_filter not in self.denied_topics

    def may_publish(self, requester: Requester, topic: str) -> bool:
        return topic not in self.denied_topics

    def ensure_queue(self, queue: str) -> None:
        self.queues.add(queue)
        self.calls.append(("ensure_queue", queue))

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
    ) -> None:
        self.calls.append(("publish", topic, body, retain, exclude_queue, expiry))
        if retain:
            self.retained[(requester.sub_point, topic)] = body

    def retained_topics(self, sub_point: str, topic_filter: str) -> list[str]:
        return [t for (point, t) in self.retained if point == sub_point and t == topic_filter]

    def delete_retained(self, sub_point: str, topic: str) -> bool:
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
