"""Identity sets: SubIdentity with JoinShared, JoinExcl, LeaveOnly and the reason codes
3154-3157 (mq-reference §1.4, §2.1-2.2; the seed's JoinShared/JoinExcl/SubIdentity text)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import ClientFactory, start_broker
from .helpers import (
    BrokerProcess,
    MQClient,
    Reply,
    assert_error,
    assert_ok,
    assert_warning,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory, 'name = "QM.IDENTITY"\n[sys]\ninterval = 0\n')
    yield process
    process.finalize()


class Sub:
    """One subscription (a fresh queue and topic) driven by one client."""

    def __init__(self, client: MQClient, form: str) -> None:
        self.client = client
        self.form = form
        self.queue = unique("q")
        self.topic = unique("ids/")

    def reg(self, identity: str | None, *options: str, **extra: str) -> Reply:
        psc: dict[str, str | list[str]] = {
            "Command": "RegSub",
            "Topic": self.topic,
            "QName": self.queue,
            **extra,
        }
        if identity is not None:
            psc["SubIdentity"] = identity
        if options:
            psc["RegOpt"] = list(options)
        return self.client.command(psc, form=self.form)

    def dereg(self, identity: str | None, *options: str) -> Reply:
        psc: dict[str, str | list[str]] = {
            "Command": "DeregSub",
            "Topic": self.topic,
            "QName": self.queue,
        }
        if identity is not None:
            psc["SubIdentity"] = identity
        if options:
            psc["RegOpt"] = list(options)
        return self.client.command(psc, form=self.form)

    def listed(self) -> list[dict[str, list[str]]]:
        return self.client.list_subs(QName=self.queue, Topic=self.topic)

    def members(self) -> dict[str, str]:
        """SubIdentity -> 'shared' | 'exclusive' (ListSubs shows ``"name (mode)"``)."""
        listed = self.listed()
        assert len(listed) == 1, listed
        members: dict[str, str] = {}
        for entry in listed[0].get("SubIdentity", []):
            name, _, mode = entry.rpartition(" (")
            members[name] = mode.rstrip(")")
        return members


@pytest.fixture
def sub(broker: BrokerProcess, clients: ClientFactory, form: str) -> Sub:
    return Sub(clients(broker.port), form)


def test_join_shared_by_two_identities(sub: Sub, clients: ClientFactory) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    # The same registration by a second identity joins the set: nothing is altered.
    assert_ok(sub.reg("appB", "JoinShared"))
    assert sub.members() == {"appA": "shared", "appB": "shared"}
    # Still one subscription: one copy per publication.
    receiver = clients(sub.client.port, sub.queue, clean=False)
    sub.client.publish(sub.topic, b"shared", qos=1)
    receiver.wait_deliveries(1, sub.topic)
    receiver.sync(sub.client)
    assert [m.payload for m in receiver.deliveries(sub.topic)] == [b"shared"]


def test_join_shared_with_correl_as_id_is_not_an_alteration(sub: Sub) -> None:
    """CorrelAsId only says which subscription is meant (its CorrelId is part of the
    identity): a second identity joins a shared CorrelAsId subscription (not 3155)."""
    mqmd = {"CorrelId": "0A0B"}
    psc = {"Command": "RegSub", "Topic": sub.topic, "QName": sub.queue}
    for member in ("appA", "appB"):
        reply = sub.client.command(
            {**psc, "RegOpt": ["CorrelAsId", "JoinShared"], "SubIdentity": member},
            form=sub.form,
            mqmd=mqmd,
        )
        assert_ok(reply)
    assert sub.members() == {"appA": "shared", "appB": "shared"}


def test_repointing_by_sub_name_is_an_alteration(sub: Sub) -> None:
    """Re-pointing a named subscription changes it: an identity outside the set without a Join
    option gets 3154, and one sharing it with others gets 3155; the subscription stays."""
    name = unique("n")
    assert_ok(sub.reg("appA", "JoinExcl", SubName=name))
    elsewhere = {"Command": "RegSub", "Topic": unique("ids/moved/"), "QName": sub.queue}
    reply = sub.client.command(
        {**elsewhere, "SubName": name, "SubIdentity": "appB", "RegOpt": "NonPers"},
        form=sub.form,
    )
    assert_error(reply, 3154)
    assert_ok(sub.reg("appA", "JoinShared", SubName=name))
    assert_ok(sub.reg("appB", "JoinShared", SubName=name))
    reply = sub.client.command({**elsewhere, "SubName": name, "SubIdentity": "appB"}, form=sub.form)
    assert_error(reply, 3155)
    assert [s["Topic"] for s in sub.client.list_subs(SubName=name)] == [[sub.topic]]


def test_join_shared_with_no_alter_joins_without_altering(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared", SubUserData="first"))
    assert_ok(sub.reg("appB", "JoinShared", "NoAlter", "InformIfRet", SubUserData="second"))
    assert sub.members() == {"appA": "shared", "appB": "shared"}
    listed = sub.listed()[0]
    assert listed["SubUserData"] == ["first"]
    assert "InformIfRet" not in listed["RegOpt"]


def test_altering_a_shared_subscription_is_in_use_3155(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    assert_ok(sub.reg("appB", "JoinShared", "NoAlter"))
    # appB is not the only member: it may not change the attributes.
    reply = sub.reg("appB", "JoinShared", "InformIfRet")
    response = assert_error(reply, 3155)
    assert response.get("SubIdentity", "appB") == "appB"
    assert "InformIfRet" not in sub.listed()[0]["RegOpt"]
    reply = sub.reg("appA", "InformIfRet", SubUserData="changed")
    assert_error(reply, 3155)
    assert sub.listed()[0].get("SubUserData", [""]) == [""]


def test_sole_member_may_alter(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    assert_ok(sub.reg("appA", "InformIfRet", SubUserData="changed"))
    listed = sub.listed()[0]
    assert "InformIfRet" in listed["RegOpt"]
    assert listed["SubUserData"] == ["changed"]


def test_already_joined_is_a_warning_3157(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    responses = assert_warning(sub.reg("appA", "JoinShared"), 3157)
    assert responses[0].get("SubIdentity", "appA") == "appA"
    assert sub.members() == {"appA": "shared"}

    other = Sub(sub.client, sub.form)
    assert_ok(other.reg("appX", "JoinExcl"))
    assert_warning(other.reg("appX", "JoinExcl"), 3157)
    assert other.members() == {"appX": "exclusive"}


def test_join_excl_refused_while_shared_3155(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    assert_ok(sub.reg("appB", "JoinShared", "NoAlter"))
    assert_error(sub.reg("appC", "JoinExcl"), 3155)
    assert_error(sub.reg("appC", "JoinExcl", "NoAlter"), 3155)
    assert_error(sub.reg("appA", "JoinExcl"), 3155)
    assert sub.members() == {"appA": "shared", "appB": "shared"}


def test_join_excl_by_the_sole_shared_member_takes_the_lock(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    assert_ok(sub.reg("appA", "JoinExcl"))
    assert sub.members() == {"appA": "exclusive"}
    assert_error(sub.reg("appB", "JoinShared", "NoAlter"), 3156)


def test_exclusive_lock_refuses_others_3156_and_downgrades(sub: Sub) -> None:
    assert_ok(sub.reg("appX", "JoinExcl"))
    assert sub.members() == {"appX": "exclusive"}
    response = assert_error(sub.reg("appY", "JoinShared"), 3156)
    assert response.get("SubIdentity", "appY") == "appY"
    assert_error(sub.reg("appY", "JoinShared", "NoAlter"), 3156)
    assert_error(sub.reg("appY", "JoinExcl"), 3156)
    assert sub.members() == {"appX": "exclusive"}
    # The lock holder joining shared downgrades its lock.
    assert_ok(sub.reg("appX", "JoinShared"))
    assert sub.members() == {"appX": "shared"}
    assert_ok(sub.reg("appY", "JoinShared", "NoAlter"))
    assert sub.members() == {"appX": "shared", "appY": "shared"}


def test_leave_only_keeps_the_subscription(sub: Sub, clients: ClientFactory) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    assert_ok(sub.reg("appB", "JoinShared", "NoAlter"))
    assert_ok(sub.dereg("appA", "LeaveOnly"))
    assert sub.members() == {"appB": "shared"}
    assert_ok(sub.dereg("appB", "LeaveOnly"))
    assert sub.members() == {}, "the set is empty and the subscription stays"
    receiver = clients(sub.client.port, sub.queue, clean=False)
    sub.client.publish(sub.topic, b"still subscribed", qos=1)
    assert [m.payload for m in receiver.wait_deliveries(1, sub.topic)] == [b"still subscribed"]


def test_leave_only_needs_a_sub_identity(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    assert_error(sub.dereg(None, "LeaveOnly"), 3154)
    assert sub.members() == {"appA": "shared"}


def test_dereg_with_sub_identity_while_others_remain_is_3155(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    assert_ok(sub.reg("appB", "JoinShared", "NoAlter"))
    assert_error(sub.dereg("appA"), 3155)
    assert sub.members() == {"appA": "shared", "appB": "shared"}
    assert_ok(sub.dereg("appB", "LeaveOnly"))
    # The sole member may remove the subscription.
    assert_ok(sub.dereg("appA"))
    assert sub.listed() == []


def test_dereg_without_sub_identity_removes_regardless_of_the_set(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    assert_ok(sub.reg("appB", "JoinShared", "NoAlter"))
    assert_ok(sub.dereg(None))
    assert sub.listed() == []


def test_sub_identity_longer_than_64_is_3154(sub: Sub) -> None:
    assert_error(sub.reg("x" * 65, "JoinShared"), 3154)
    assert sub.listed() == []
    assert_ok(sub.reg("y" * 64, "JoinShared"))
    assert sub.members() == {"y" * 64: "shared"}
    assert_error(sub.dereg("z" * 65, "LeaveOnly"), 3154)


def test_sub_identity_not_in_the_set_without_join_is_3154(sub: Sub) -> None:
    assert_ok(sub.reg("appA", "JoinShared"))
    reply = sub.reg("appZ", "InformIfRet")
    assert_error(reply, 3154)
    assert sub.members() == {"appA": "shared"}
    assert "InformIfRet" not in sub.listed()[0]["RegOpt"]
