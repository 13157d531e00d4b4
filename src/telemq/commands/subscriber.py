"""The subscriber commands of MQ publish/subscribe: RegSub, DeregSub and ReqUpdate.

Theory of operation
-------------------
All three go to the control queue and address subscriptions: by SubName, or by the key
(identity, topic, subscription point, filter) the registry files them under. RegSub creates
a subscription for each permitted topic, or alters the one that exists (options, user data,
expiry, its identity set through JoinShared/JoinExcl), or re-points a named one to a new
identity, topic or filter. It validates everything and plans each change as a closure
(`_plan_create`, `_plan_update`, `_plan_repoint`) before it applies any, so that a refusal
found at the last topic leaves nothing changed. DeregSub removes subscriptions (or with
LeaveOnly one member of an identity set), and ReqUpdate sends a PubOnReqOnly subscription
the retained publications it asks for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..filters import Filter
from ..subscriptions import STORED_OPTIONS, Identity, Persistence, Registry, Subscription
from .checks import (
    CommandFailed,
    check_addressable,
    check_filters,
    command_filter,
    command_identity,
    command_options,
    declared_sub_point,
    may_address,
    queue_owner,
    subscription_attributes,
)
from .codec import Command, Reason, Reply
from .host import Host, Requester
from .reasons import ReasonCode

MAX_SUB_IDENTITY = 64
PERSISTENCE_OPTIONS = {p.value: p for p in Persistence}
REGSUB_OPTIONS = frozenset(
    {
        "AddName",
        "CorrelAsId",
        "DupsOK",
        "FullResp",
        "InformIfRet",
        "JoinExcl",
        "JoinShared",
        "Local",
        "NewPubsOnly",
        "NoAlter",
        "None",
        "PubOnReqOnly",
        "VariableUserId",
        *PERSISTENCE_OPTIONS,
    }
)
COMMAND_ONLY_OPTIONS = frozenset({"AddName", "FullResp", "JoinExcl", "JoinShared", "NoAlter"})
# Options that do not alter an existing subscription's attributes: the command-only ones, and
# CorrelAsId, which addresses the subscription (its CorrelId is part of the identity).
NOT_ALTERING_OPTIONS = COMMAND_ONLY_OPTIONS | {"CorrelAsId"}
DEREGSUB_OPTIONS = frozenset(
    {"CorrelAsId", "DeregAll", "FullResp", "LeaveOnly", "VariableUserId", "None"}
)
REQUPDATE_OPTIONS = frozenset({"CorrelAsId", "VariableUserId", "None"})


def _persistence(options: list[str]) -> Persistence | None:
    """The seed's rule: of several persistence options, the last one wins."""
    chosen: Persistence | None = None
    for option in options:
        if option in PERSISTENCE_OPTIONS:
            chosen = PERSISTENCE_OPTIONS[option]
    return chosen


# -- RegSub -----------------------------------------------------------------------------


def _join(
    subscription: Subscription, member: str, options: list[str], warnings: list[Reason]
) -> Callable[[], None] | None:
    """Plan a JoinShared/JoinExcl on an existing subscription (raises on refusal)."""
    exclusive = "JoinExcl" in options
    if not exclusive and "JoinShared" not in options:
        return None
    holder = subscription.locked_by()
    if holder is not None and holder != member:
        raise CommandFailed(
            ReasonCode.SUBSCRIPTION_LOCKED,
            f"the subscription is locked by identity {holder!r}",
            SubIdentity=member,
        )
    current = subscription.members.get(member)
    if exclusive:
        others = [m for m in subscription.members if m != member]
        if others:
            raise CommandFailed(
                ReasonCode.SUBSCRIPTION_IN_USE,
                "other identities share the subscription",
                SubIdentity=member,
            )
        if current is True:
            warnings.append(Reason(ReasonCode.ALREADY_JOINED, {"SubIdentity": member}))
            return None
    else:
        if current is False:
            warnings.append(Reason(ReasonCode.ALREADY_JOINED, {"SubIdentity": member}))
            return None
        # current is True: the lock holder joins shared -> the lock is downgraded

    def apply() -> None:
        subscription.members[member] = exclusive

    return apply


@dataclass(frozen=True, slots=True)
class _Registration:
    """What a RegSub asks for besides the subscription's key: the same for each of its
    topics, whether that creates, updates or re-points a subscription."""

    requester: Requester
    name: str
    member: str  # SubIdentity
    options: list[str]
    persistence: Persistence | None
    stored: frozenset[str]  # the options kept on the subscription
    user_data: list[str] | None
    expiry_at: float | None
    now: float


def reg_sub(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    options = command_options(command, "RegOpt", REGSUB_OPTIONS, ReasonCode.REG_OPTIONS_ERROR)
    topics = command.all("Topic")
    check_filters(topics, host)
    name = command.first("SubName")
    member = command.first("SubIdentity")
    if "AddName" in options and not name:
        raise CommandFailed(ReasonCode.REG_OPTIONS_ERROR, "AddName needs a SubName")
    if "FullResp" in options and len(topics) > 1:
        raise CommandFailed(ReasonCode.REG_OPTIONS_ERROR, "FullResp allows only one Topic")
    if "JoinShared" in options and "JoinExcl" in options:
        raise CommandFailed(ReasonCode.REG_OPTIONS_ERROR, "JoinShared and JoinExcl together")
    if ("JoinShared" in options or "JoinExcl" in options) and not member:
        raise CommandFailed(ReasonCode.SUB_IDENTITY_ERROR, "a Join option needs a SubIdentity")
    if len(member) > MAX_SUB_IDENTITY:
        raise CommandFailed(
            ReasonCode.SUB_IDENTITY_ERROR,
            f"SubIdentity is {len(member)} characters long (at most {MAX_SUB_IDENTITY})",
            SubIdentity=member[:64],
        )
    if name.startswith("MQ"):
        raise CommandFailed(ReasonCode.SUB_NAME_ERROR, "names beginning MQ are reserved")
    if name and len(topics) > 1:
        raise CommandFailed(
            ReasonCode.SUB_NAME_ERROR,
            "a SubName names one subscription: give one Topic with it",
            SubName=name,
        )
    sub_point = declared_sub_point(command, requester, host)
    identity = command_identity(command, requester, host, "CorrelAsId" in options)
    filter_text, compiled = command_filter(command, host.max_filter_size or None)
    now = host.now()
    expiry_at = None if command.mqmd.expiry is None else now + command.mqmd.expiry / 10.0
    persistence = _persistence(options)
    stored = frozenset(o for o in options if o in STORED_OPTIONS)
    user_data = command.psc.get("SubUserData")
    asked = _Registration(
        requester, name, member, options, persistence, stored, user_data, expiry_at, now
    )

    # The queue the deliveries go to here: the queue itself, or for a queue on another
    # broker the session that holds them on their way (`Identity.delivery_queue`).
    queue = identity.delivery_queue
    owner = queue_owner(queue, requester, host)
    # Deliveries to a queue are what its owner may read, whoever registers them.
    reader = Requester(queue, owner, requester.sub_point)
    warnings: list[Reason] = []
    permitted: list[str] = []
    for topic in topics:
        if host.may_subscribe(requester, topic) and (
            owner == requester.user_id or host.may_subscribe(reader, topic)
        ):
            permitted.append(topic)
        else:
            warnings.append(Reason(ReasonCode.NOT_AUTHORIZED, {"Topic": topic}))
    # Identity ownership [seed: one user id per identity].
    for other in registry.of_queue(queue):
        if (
            other.identity == identity
            and other.owner != requester.user_id
            and "VariableUserId" not in other.options
        ):
            raise CommandFailed(
                ReasonCode.DUPLICATE_IDENTITY,
                f"the identity belongs to user {other.owner!r}",
                UserId=other.owner,
            )

    plans: list[Callable[[], Subscription]] = []
    arriving = 0  # subscriptions the queue gains (its quota)
    named = registry.by_name(sub_point, name) if name else None
    if named is not None and not may_address(named, requester):
        # A SubName is not a way to take over (re-point, re-own) another user's subscription.
        raise CommandFailed(ReasonCode.WRONG_USER, f"subscription {name!r} belongs to another user")
    for topic in permitted:
        key = (identity, topic, sub_point, filter_text)
        existing = registry.get(key)
        if named is not None and existing is None:
            # Re-point the named subscription to the new traditional identity/topic: an
            # alteration like any other (identity set, options, user data, expiry).
            update = _plan_update(named, asked, registry, warnings, repoint=True)
            plans.append(
                _plan_repoint(named, identity, topic, filter_text, compiled, registry, host, update)
            )
            if named.queue != queue:
                arriving += 1
            continue
        if named is not None and existing is not None and existing is not named:
            raise CommandFailed(
                ReasonCode.DUPLICATE_SUBSCRIPTION,
                "the new attributes match a different existing subscription",
                Topic=topic,
            )
        if existing is None:
            plans.append(
                _plan_create(registry, identity, topic, sub_point, filter_text, compiled, asked)
            )
            arriving += 1
            continue
        plans.append(_plan_update(existing, asked, registry, warnings))
    if compiled is not None and arriving and host.max_filter_size_per_user:
        held = registry.filter_size_of(requester.user_id)
        limit = host.max_filter_size_per_user
        if held + arriving * compiled.size > limit:
            raise CommandFailed(
                ReasonCode.FILTER_ERROR,
                f"user {requester.user_id!r} holds filters of size {held}; "
                f"{arriving * compiled.size} more would pass the limit of {limit}"
                " (limits.max_filter_size_per_user)",
                Filter=filter_text,
            )
    over_quota = host.reserve_subscriptions(queue, arriving) if arriving else None
    if over_quota is not None:
        raise CommandFailed(ReasonCode.BROKER_COMMAND_FAILED, over_quota, QName=identity.queue)

    if plans:
        host.ensure_queue(queue, owner)
    applied = [plan() for plan in plans]
    for subscription in applied:
        host.subscription_changed(subscription)
        if "NewPubsOnly" not in subscription.options and "PubOnReqOnly" not in (
            subscription.options
        ):
            host.send_retained(subscription)
    reply = Reply("warning" if warnings else "ok", warnings)
    if "FullResp" in options and len(applied) == 1:
        reply.attributes = subscription_attributes(applied[0])
    return reply


def _plan_create(
    registry: Registry,
    identity: Identity,
    topic: str,
    sub_point: str,
    filter_text: str,
    compiled: Filter | None,
    asked: _Registration,
) -> Callable[[], Subscription]:
    name, member, options = asked.name, asked.member, asked.options
    if name and registry.by_name(sub_point, name) is not None:
        raise CommandFailed(ReasonCode.SUB_NAME_ERROR, f"SubName {name!r} is taken", SubName=name)
    members: dict[str, bool] = {}
    if member and ("JoinShared" in options or "JoinExcl" in options):
        members[member] = "JoinExcl" in options

    def apply() -> Subscription:
        subscription = Subscription(
            id=registry.new_id(),
            identity=identity,
            topic=topic,
            sub_point=sub_point,
            filter_text=filter_text,
            owner=asked.requester.user_id,
            name=name,
            user_data=asked.user_data[0] if asked.user_data else "",
            options=asked.stored,
            persistence=asked.persistence or Persistence.PERS_AS_PUB,
            members=members,
            expiry_at=asked.expiry_at,
            created_at=asked.now,
            compiled=compiled,
        )
        registry.add(subscription)
        return subscription

    return apply


def _plan_update(
    existing: Subscription,
    asked: _Registration,
    registry: Registry,
    warnings: list[Reason],
    repoint: bool = False,
) -> Callable[[], Subscription]:
    """Plan the re-registration of `existing`; `repoint`: it also moves to another identity,
    topic or filter, which alters it even without any option."""
    name, member, options, user_data = asked.name, asked.member, asked.options, asked.user_data
    if name and existing.name != name:
        if not existing.name and "AddName" not in options:
            raise CommandFailed(
                ReasonCode.DUPLICATE_SUBSCRIPTION,
                "an unnamed subscription with this identity exists (use AddName)",
                Topic=existing.topic,
            )
        if existing.name:
            # Two names never refer to one subscription (IBM: MQRCCF_DUPLICATE_SUBSCRIPTION).
            raise CommandFailed(
                ReasonCode.DUPLICATE_SUBSCRIPTION,
                f"the subscription is already named {existing.name!r}",
                SubName=name,
            )
        if registry.by_name(existing.sub_point, name) is not None:
            raise CommandFailed(
                ReasonCode.SUB_NAME_ERROR, f"SubName {name!r} is taken", SubName=name
            )
    if (
        member
        and member not in existing.members
        and existing.members
        and not ("JoinShared" in options or "JoinExcl" in options)
    ):
        raise CommandFailed(
            ReasonCode.SUB_IDENTITY_ERROR,
            "SubIdentity is not in the identity set and no Join option was given",
            SubIdentity=member,
        )
    join = _join(existing, member, options, warnings) if member else None
    # Join, AddName, NoAlter and FullResp act on the command, not on the attributes, and
    # CorrelAsId only says which subscription is meant.
    setting = [o for o in options if o not in NOT_ALTERING_OPTIONS]
    alter = "NoAlter" not in options
    changes = bool(setting) or user_data is not None or repoint
    if (alter or repoint) and changes and member and any(m != member for m in existing.members):
        raise CommandFailed(
            ReasonCode.SUBSCRIPTION_IN_USE,
            "other identities share the subscription: it cannot be altered",
            SubIdentity=member,
        )
    if (
        "VariableUserId" in options
        and "VariableUserId" not in existing.options
        and existing.owner != asked.requester.user_id
    ):
        raise CommandFailed(
            ReasonCode.WRONG_USER, "only the owner may add VariableUserId to a subscription"
        )

    def apply() -> Subscription:
        old_name = existing.name
        if name and not existing.name:
            existing.name = name
        if join is not None:
            join()
        if alter:
            if setting:
                existing.options = asked.stored
                existing.persistence = asked.persistence or Persistence.PERS_AS_PUB
                if "VariableUserId" not in asked.stored:
                    existing.owner = asked.requester.user_id
            if user_data is not None:
                existing.user_data = user_data[0]
            existing.expiry_at = asked.expiry_at
        registry.changed(existing, old_name)
        return existing

    return apply


def _plan_repoint(
    named: Subscription,
    identity: Identity,
    topic: str,
    filter_text: str,
    compiled: Filter | None,
    registry: Registry,
    host: Host,
    update: Callable[[], Subscription],
) -> Callable[[], Subscription]:
    """Plan moving `named` to a new identity/topic/filter, then `update` (its attributes)."""

    def apply() -> Subscription:
        registry.remove(named)
        if identity.delivery_queue != named.queue:
            host.subscription_removed(named)  # its stored copy is filed under the old queue
        named.identity = identity
        named.topic = topic
        named.filter_text = filter_text
        named.compiled = compiled
        registry.add(named)
        return update()

    return apply


# -- DeregSub ---------------------------------------------------------------------------


def dereg_sub(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    options = command_options(command, "RegOpt", DEREGSUB_OPTIONS, ReasonCode.REG_OPTIONS_ERROR)
    if "FullResp" in options and "DeregAll" in options:
        raise CommandFailed(ReasonCode.REG_OPTIONS_ERROR, "FullResp cannot go with DeregAll")
    if "FullResp" in options and len(command.all("Topic")) > 1:
        raise CommandFailed(ReasonCode.REG_OPTIONS_ERROR, "FullResp allows only one Topic")
    member = command.first("SubIdentity")
    if "LeaveOnly" in options and not member:
        raise CommandFailed(ReasonCode.SUB_IDENTITY_ERROR, "LeaveOnly needs a SubIdentity")
    if len(member) > MAX_SUB_IDENTITY:
        raise CommandFailed(ReasonCode.SUB_IDENTITY_ERROR, "SubIdentity longer than 64")
    topics = command.all("Topic")
    name = command.first("SubName")
    sub_point = declared_sub_point(command, requester, host)
    filter_given = "Filter" in command.psc
    filter_text, _ = command_filter(command)
    warnings: list[Reason] = []
    targets: list[Subscription] = []
    if name:
        named = registry.by_name(sub_point, name)
        if named is None:
            raise CommandFailed(ReasonCode.NOT_REGISTERED, f"no subscription named {name!r}")
        targets.append(named)
    else:
        identity = command_identity(command, requester, host, "CorrelAsId" in options)
        deregister_all = "DeregAll" in options and not (
            topics and "SubPoint" in command.psc and filter_given
        )
        if deregister_all:
            if topics:
                check_filters(topics, host)
            # Without CorrelAsId: every CorrelId's registrations of the queue.
            any_correl = "CorrelAsId" not in options
            targets = [
                s
                for s in registry.of_queue(identity.delivery_queue)
                if (s.identity == identity or (any_correl and s.identity.qmgr == identity.qmgr))
                and not s.mqtt
                and (not topics or s.topic in topics)
                and ("SubPoint" not in command.psc or s.sub_point == sub_point)
                and (not filter_given or s.filter_text == filter_text)
            ]
            if not targets:
                raise CommandFailed(ReasonCode.NOT_REGISTERED, "no matching subscription")
        else:
            check_filters(topics, host)
            missing: list[str] = []
            for topic in topics:
                found = registry.get((identity, topic, sub_point, filter_text))
                if found is None:
                    missing.append(topic)
                else:
                    targets.append(found)
            if not targets:
                raise CommandFailed(ReasonCode.NOT_REGISTERED, "not registered", Topic=missing[0])
            warnings.extend(Reason(ReasonCode.NOT_REGISTERED, {"Topic": t}) for t in missing)
    for target in targets:
        check_addressable(target, requester, options)
        if member and "LeaveOnly" not in options and any(m != member for m in target.members):
            raise CommandFailed(
                ReasonCode.SUBSCRIPTION_IN_USE,
                "other identities still share the subscription",
                SubIdentity=member,
            )
    reply = Reply("warning" if warnings else "ok", warnings)
    if "FullResp" in options and len(targets) == 1:
        reply.attributes = subscription_attributes(targets[0])
    for target in targets:
        if "LeaveOnly" in options:
            if target.members.pop(member, None) is None:
                warnings.append(Reason(ReasonCode.SUB_IDENTITY_ERROR, {"SubIdentity": member}))
                reply.completion = "warning"
            host.subscription_changed(target)
        else:
            registry.remove(target)
            host.subscription_removed(target)
    return reply


# -- ReqUpdate --------------------------------------------------------------------------


def req_update(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    options = command_options(command, "RegOpt", REQUPDATE_OPTIONS, ReasonCode.REG_OPTIONS_ERROR)
    topics = command.all("Topic")
    name = command.first("SubName")
    sub_point = declared_sub_point(command, requester, host)
    if len(topics) > 1 or (not topics and not name):
        raise CommandFailed(ReasonCode.TOPIC_ERROR, "ReqUpdate takes exactly one Topic")
    if topics:
        check_filters(topics, host)
    if name:
        subscription = registry.by_name(sub_point, name)
    else:
        identity = command_identity(command, requester, host, "CorrelAsId" in options)
        filter_text, _ = command_filter(command)
        subscription = registry.get((identity, topics[0], sub_point, filter_text))
    if subscription is None:
        raise CommandFailed(
            ReasonCode.NOT_REGISTERED,
            "no subscription with this identity, topic, subscription point and filter",
            **({"Topic": topics[0]} if topics else {}),
        )
    check_addressable(subscription, requester, options)
    if topics and topics[0] != subscription.topic:
        # The update is of the subscription's own topic: another one would hand out
        # retained publications the subscription (and its authorization) never covered.
        raise CommandFailed(
            ReasonCode.NOT_REGISTERED,
            f"subscription {name!r} is for another topic",
            Topic=topics[0],
        )
    if not host.send_retained(subscription):
        # IBM: "the request fails with return code MQRCCF_NO_RETAINED_MSG" (MQCC_FAILED).
        raise CommandFailed(
            ReasonCode.NO_RETAINED_MSG,
            "no retained publication matches the subscription",
            Topic=subscription.topic,
        )
    return Reply("ok")
