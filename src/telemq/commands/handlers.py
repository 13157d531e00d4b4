"""The command handlers: RegSub, DeregSub, ReqUpdate, Publish, DeletePub (and telemq's
ListSubs and Put).

Each handler validates the whole command first and only then changes anything,
so an error reply means nothing was processed (MQ rule); a warning reply means
the rest was processed. Handlers work on the `Registry` and ask the broker for
everything else through the small `Host` protocol (authorization, sessions,
retained messages, publishing), so they hold no I/O and can be driven by the
broker, the CLI's in-process API and tests alike.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..filters import Filter, FilterError, compile_filter
from ..protocol.topics import TopicLimits, is_wildcard_filter
from ..subscriptions.registry import (
    RESERVED_QUEUE_PREFIXES,
    STORED_OPTIONS,
    Identity,
    Persistence,
    Registry,
    Subscription,
)
from .codec import Command, Reason, Reply
from .reasons import CONTROL_QUEUE, DEFAULT_STREAM, ReasonCode

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
PUB_OPTIONS = frozenset({"None", "RetainPub", "OtherSubsOnly", "CorrelAsId", "Local", "NoReg"})
DEL_OPTIONS = frozenset({"None", "Local"})
COMMAND_QUEUES = {
    "RegSub": CONTROL_QUEUE,
    "DeregSub": CONTROL_QUEUE,
    "ReqUpdate": CONTROL_QUEUE,
    "Publish": DEFAULT_STREAM,
    "DeletePub": DEFAULT_STREAM,
    "ListSubs": CONTROL_QUEUE,
    "Put": CONTROL_QUEUE,
}


@dataclass(slots=True)
class Requester:
    """Who sent the command, and how."""

    client_id: str
    user_id: str
    sub_point: str  # the default subscription point (the listener's)
    qos: int = 0  # QoS of the command message (Publish and Put deliver at it)


class PutResult(enum.Enum):
    """What became of a message put on one queue (`Host.put_to_queue`)."""

    PUT = "put"  # sent, or waiting in the queue
    NO_QUEUE = "no queue"  # no session has that name
    NOT_CONNECTED = "not connected"  # QoS 0 is not queued for an offline session
    FULL = "full"  # the queue holds its maximum of messages


class Host(Protocol):
    """What the handlers need from the broker."""

    qmgr_name: str
    topic_limits: TopicLimits  # the broker's bounds on topics (3072 beyond them)
    max_filter_size: int  # `Filter.size` of one filter (3150 beyond; 0: no bound)
    max_filter_size_per_user: int  # of all of one user's filters (3150; 0: no bound)

    def now(self) -> float: ...

    def broker_known(self, name: str) -> bool:
        """Is `name` another broker of this broker's network (a `QMgrName` it can reach)?"""
        ...

    def proxies_asked(self) -> list[tuple[str, str, str, int]]:
        """The proxies this broker asks of its neighbours: (neighbour, sub point, filter,
        subscriptions it stands for)."""
        ...

    def sub_point_declared(self, name: str) -> bool: ...

    def may_subscribe(self, requester: Requester, topic_filter: str) -> bool: ...

    def may_publish(self, requester: Requester, topic: str) -> bool: ...

    def ensure_queue(self, queue: str, owner: str) -> None: ...

    def queue_owner(self, queue: str) -> str | None: ...

    def may_use_queue(self, requester: Requester, queue: str) -> bool: ...

    def is_admin(self, requester: Requester) -> bool: ...

    def reserve_subscriptions(self, queue: str, count: int) -> str | None:
        """None when `queue` may gain `count` subscriptions; else why not (the broker
        counts the refusal)."""
        ...

    def subscription_changed(self, subscription: Subscription) -> None: ...

    def subscription_removed(self, subscription: Subscription) -> None: ...

    def send_retained(self, subscription: Subscription) -> int: ...

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
        """`local`: PubOpt Local, for this broker's subscribers only (not the network's)."""

    def retained_topics(self, sub_point: str, topic_filter: str) -> list[str]: ...

    def delete_retained(self, sub_point: str, topic: str, local: bool = False) -> bool:
        """`local`: DelOpt Local, at this broker only (not the network's)."""

    def put_to_queue(
        self, requester: Requester, queue: str, topic: str, body: bytes, qos: int
    ) -> PutResult: ...


class CommandFailed(Exception):
    """Ends a handler with an error reply (nothing processed)."""

    def __init__(self, code: ReasonCode, message: str = "", **properties: str) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
        self.properties = properties


def _options(command: Command, name: str, allowed: frozenset[str], code: ReasonCode) -> list[str]:
    values = command.all(name)
    for value in values:
        if value not in allowed:
            raise CommandFailed(code, f"unknown {name} {value!r}", **{name: value})
    if len(values) > 1:
        values = [v for v in values if v != "None"]
    return values


def _persistence(options: list[str]) -> Persistence | None:
    """The seed's rule: of several persistence options, the last one wins."""
    chosen: Persistence | None = None
    for option in options:
        if option in PERSISTENCE_OPTIONS:
            chosen = PERSISTENCE_OPTIONS[option]
    return chosen


def _sub_point(command: Command, requester: Requester, host: Host) -> str:
    sub_point = command.first("SubPoint", requester.sub_point)
    if not host.sub_point_declared(sub_point):
        raise CommandFailed(
            ReasonCode.SUBSCRIPTION_POINT_ERR,
            f"subscription point {sub_point!r} is not declared",
            SubPoint=sub_point,
        )
    return sub_point


def _check_queue_name(queue: str) -> None:
    """A queue is an MQTT session: its name must be usable as a client id and a topic level,
    and not be one of the sessions the network keeps for itself."""
    if not queue or "\x00" in queue or "+" in queue or "#" in queue or len(queue) > 65535:
        raise CommandFailed(ReasonCode.Q_NAME_ERROR, f"invalid queue name {queue!r}", QName=queue)
    if queue.startswith(RESERVED_QUEUE_PREFIXES):
        raise CommandFailed(
            ReasonCode.Q_NAME_ERROR,
            f"queue name {queue!r}: names beginning {', '.join(RESERVED_QUEUE_PREFIXES)}"
            " are the network's",
            QName=queue,
        )


def _identity(command: Command, requester: Requester, host: Host, correl: bool) -> Identity:
    """The identity a command names. A `QMgrName` of another broker of the network makes a
    remote identity: its deliveries cross the links to queue `QName` there."""
    qmgr = command.first("QMgrName") or command.mqmd.reply_to_qmgr or host.qmgr_name
    remote = qmgr != host.qmgr_name
    if remote and not host.broker_known(qmgr):
        raise CommandFailed(
            ReasonCode.Q_MGR_NAME_ERROR,
            f"queue manager {qmgr!r} is neither this broker ({host.qmgr_name!r}) nor a broker"
            " of its network",
            QMgrName=qmgr,
        )
    queue = command.first("QName") or command.mqmd.reply_to_q or requester.client_id
    _check_queue_name(queue)
    correl_id = ""
    if correl:
        if command.mqmd.correl_is_zero():
            raise CommandFailed(
                ReasonCode.CORREL_ID_ERROR, "CorrelAsId needs a non-zero <mqmd><CorrelId>"
            )
        correl_id = command.mqmd.correl_id
    return Identity(qmgr, queue, correl_id, remote)


def _queue_owner(queue: str, requester: Requester, host: Host) -> str:
    """The owner of the queue the requester addresses, after checking that the requester
    may use it: a queue belongs to its user; others need admin rights or a `queue` grant.
    A queue that does not exist yet will be the requester's."""
    owner = host.queue_owner(queue)
    if owner is None or owner == requester.user_id:
        return requester.user_id
    if not host.may_use_queue(requester, queue):
        raise CommandFailed(
            ReasonCode.NOT_AUTHORIZED,
            f"queue {queue!r} belongs to another user (an administrator or a queue grant"
            " is needed)",
            QName=queue,
        )
    return owner


def _filter(command: Command, max_size: int | None = None) -> tuple[str, Filter | None]:
    """The command's filter, canonical and compiled; a new one (RegSub) may be refused for
    its size, one being addressed (DeregSub, ReqUpdate) never is."""
    text = command.first("Filter")
    if not text:
        return "", None
    try:
        compiled = compile_filter(text, max_size, "limits.max_filter_size")
    except FilterError as error:
        raise CommandFailed(
            ReasonCode.FILTER_ERROR, str(error), Filter=text, Position=str(error.position)
        ) from None
    return compiled.text, compiled


def _check_filters(topics: list[str], host: Host) -> None:
    if not topics:
        raise CommandFailed(ReasonCode.TOPIC_ERROR, "the <Topic> property is missing")
    for topic in topics:
        problem = host.topic_limits.filter_error(topic)
        if problem:
            raise CommandFailed(ReasonCode.TOPIC_ERROR, problem, Topic=topic[:256])


def _attributes(subscription: Subscription) -> dict[str, list[str]]:
    """All attributes of a subscription, as FullResp and `subs list` show them."""
    options = [*sorted(subscription.options), subscription.persistence.value]
    proxy_for = subscription.proxy_for
    attributes = {
        "Proxy": [proxy_for],
        "Direction": ["from" if proxy_for else ""],
        "Topic": [subscription.topic],
        "SubPoint": [subscription.sub_point],
        "Filter": [subscription.filter_text],
        "QMgrName": [subscription.identity.qmgr],
        "QName": [subscription.identity.queue],
        "CorrelId": [subscription.identity.correl_id],
        "UserId": [subscription.owner],
        "SubName": [subscription.name],
        "SubUserData": [subscription.user_data],
        "SubIdentity": [
            f"{member} ({'exclusive' if exclusive else 'shared'})"
            for member, exclusive in subscription.members.items()
        ],
        "RegOpt": options,
        "Expiry": ["" if subscription.expiry_at is None else f"{subscription.expiry_at:.1f}"],
        "CreationTime": [f"{subscription.created_at:.3f}"],
    }
    return {key: values for key, values in attributes.items() if values and values != [""]}


def subscription_attributes(subscription: Subscription) -> dict[str, list[str]]:
    return _attributes(subscription)


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
    options = _options(command, "RegOpt", REGSUB_OPTIONS, ReasonCode.REG_OPTIONS_ERROR)
    topics = command.all("Topic")
    _check_filters(topics, host)
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
    sub_point = _sub_point(command, requester, host)
    identity = _identity(command, requester, host, "CorrelAsId" in options)
    filter_text, compiled = _filter(command, host.max_filter_size or None)
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
    owner = _queue_owner(queue, requester, host)
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
    if named is not None and not _may_address(named, requester):
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
        reply.attributes = _attributes(applied[0])
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


def _may_address(subscription: Subscription, requester: Requester) -> bool:
    """RegSub: the owner, or anyone for a VariableUserId subscription."""
    return subscription.owner == requester.user_id or "VariableUserId" in subscription.options


def _check_addressable(
    subscription: Subscription, requester: Requester, options: list[str]
) -> None:
    """DeregSub and ReqUpdate: another user's VariableUserId subscription only with the
    option on the command too [MQ: "must also be supplied on DeregSub/ReqUpdate"]."""
    if subscription.owner == requester.user_id:
        return
    if "VariableUserId" not in subscription.options:
        raise CommandFailed(
            ReasonCode.WRONG_USER, f"the subscription belongs to {subscription.owner!r}"
        )
    if "VariableUserId" not in options:
        raise CommandFailed(
            ReasonCode.WRONG_USER,
            f"the subscription belongs to {subscription.owner!r}: another user addresses it"
            " with RegOpt VariableUserId",
        )


def dereg_sub(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    options = _options(command, "RegOpt", DEREGSUB_OPTIONS, ReasonCode.REG_OPTIONS_ERROR)
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
    sub_point = _sub_point(command, requester, host)
    filter_given = "Filter" in command.psc
    filter_text, _ = _filter(command)
    warnings: list[Reason] = []
    targets: list[Subscription] = []
    if name:
        named = registry.by_name(sub_point, name)
        if named is None:
            raise CommandFailed(ReasonCode.NOT_REGISTERED, f"no subscription named {name!r}")
        targets.append(named)
    else:
        identity = _identity(command, requester, host, "CorrelAsId" in options)
        deregister_all = "DeregAll" in options and not (
            topics and "SubPoint" in command.psc and filter_given
        )
        if deregister_all:
            if topics:
                _check_filters(topics, host)
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
            _check_filters(topics, host)
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
        _check_addressable(target, requester, options)
        if member and "LeaveOnly" not in options and any(m != member for m in target.members):
            raise CommandFailed(
                ReasonCode.SUBSCRIPTION_IN_USE,
                "other identities still share the subscription",
                SubIdentity=member,
            )
    reply = Reply("warning" if warnings else "ok", warnings)
    if "FullResp" in options and len(targets) == 1:
        reply.attributes = _attributes(targets[0])
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
    options = _options(command, "RegOpt", REQUPDATE_OPTIONS, ReasonCode.REG_OPTIONS_ERROR)
    topics = command.all("Topic")
    name = command.first("SubName")
    sub_point = _sub_point(command, requester, host)
    if len(topics) > 1 or (not topics and not name):
        raise CommandFailed(ReasonCode.TOPIC_ERROR, "ReqUpdate takes exactly one Topic")
    if topics:
        _check_filters(topics, host)
    if name:
        subscription = registry.by_name(sub_point, name)
    else:
        identity = _identity(command, requester, host, "CorrelAsId" in options)
        filter_text, _ = _filter(command)
        subscription = registry.get((identity, topics[0], sub_point, filter_text))
    if subscription is None:
        raise CommandFailed(
            ReasonCode.NOT_REGISTERED,
            "no subscription with this identity, topic, subscription point and filter",
            **({"Topic": topics[0]} if topics else {}),
        )
    _check_addressable(subscription, requester, options)
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


# -- Publish / DeletePub ----------------------------------------------------------------


def publish(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    options = _options(command, "PubOpt", PUB_OPTIONS, ReasonCode.PUB_OPTIONS_ERROR)
    topics = command.all("Topic")
    if not topics:
        raise CommandFailed(ReasonCode.TOPIC_ERROR, "the <Topic> property is missing")
    for topic in topics:
        problem = host.topic_limits.name_error(topic)
        if problem:
            raise CommandFailed(ReasonCode.TOPIC_ERROR, problem, Topic=topic[:256])
    if "CorrelAsId" in options and command.mqmd.correl_is_zero():
        raise CommandFailed(ReasonCode.CORREL_ID_ERROR, "CorrelAsId needs a non-zero CorrelId")
    exclude = None
    if "OtherSubsOnly" in options:
        exclude = command.first("QName") or command.mqmd.reply_to_q or requester.client_id
    warnings: list[Reason] = []
    for topic in topics:
        if not host.may_publish(requester, topic):
            warnings.append(Reason(ReasonCode.NOT_AUTHORIZED, {"Topic": topic}))
            continue
        expiry = None if command.mqmd.expiry is None else command.mqmd.expiry / 10.0
        host.publish(
            requester,
            topic,
            command.body,
            "RetainPub" in options,
            exclude,
            expiry,
            local="Local" in options,
        )
    return Reply("warning" if warnings else "ok", warnings)


def delete_pub(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    local = "Local" in _options(command, "DelOpt", DEL_OPTIONS, ReasonCode.DEL_OPTIONS_ERROR)
    topics = command.all("Topic")
    _check_filters(topics, host)
    sub_point = _sub_point(command, requester, host)
    warnings: list[Reason] = []
    for topic in topics:
        # Authorization is per retained publication: those on topics the user may publish
        # to go; if any other matched, one warning names the Topic (a name the user may not
        # publish to is refused whether or not anything is retained there).
        names = host.retained_topics(sub_point, topic) if is_wildcard_filter(topic) else [topic]
        refused = False
        for name in names:
            if host.may_publish(requester, name):
                host.delete_retained(sub_point, name, local)
            else:
                refused = True
        if refused:
            warnings.append(Reason(ReasonCode.NOT_AUTHORIZED, {"Topic": topic}))
    return Reply("warning" if warnings else "ok", warnings)


# ListSubs' Kind: which subscriptions, by whether they are proxy subscriptions (the ones
# neighbour brokers asked for, listed to admins: their owner is no user).
LIST_KINDS: dict[str, Callable[[bool], bool]] = {
    "Subscriptions": lambda proxy: not proxy,
    "Proxies": lambda proxy: proxy,
    "All": lambda proxy: True,
}


def list_subs(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    """telemq extension: the requester's subscriptions with all their attributes (as
    FullResp shows one): those it registered and those on its queues. An admin sees all.

    Optional properties narrow the list: QName, SubPoint, SubName, Topic (exact); Kind
    (Subscriptions, the default, Proxies or All) takes in proxy subscriptions, which show
    the neighbour broker they stand for as `Proxy`: `Direction` `from` for those it asked
    of this broker, and (to admins, after them) `to` for those this broker asks of it,
    with `Count`, the subscriptions each stands for.
    """
    queue = command.first("QName")
    sub_point = command.first("SubPoint") if "SubPoint" in command.psc else None
    name = command.first("SubName")
    topics = command.all("Topic")
    kind = command.first("Kind") or "Subscriptions"
    if kind not in LIST_KINDS:
        raise CommandFailed(
            ReasonCode.PARM_SYNTAX_ERROR, f"Kind {kind!r} is not Subscriptions, Proxies or All"
        )
    user = requester.user_id
    everyone = host.is_admin(requester)
    chosen = [
        s
        for s in sorted(registry, key=lambda s: s.id)
        if LIST_KINDS[kind](bool(s.proxy_for))
        and (everyone or s.owner == user or host.queue_owner(s.queue) == user)
        and (not queue or s.identity.queue == queue)  # QName: the queue, wherever it lives
        and (sub_point is None or s.sub_point == sub_point)
        and (not name or s.name == name)
        and (not topics or s.topic in topics)
    ]
    listed = [_attributes(s) for s in chosen]
    if everyone and kind != "Subscriptions" and not queue and not name:
        for neighbour, point, topic_filter, count in host.proxies_asked():
            if (sub_point is None or point == sub_point) and (not topics or topic_filter in topics):
                asked = {
                    "Proxy": [neighbour],
                    "Direction": ["to"],
                    "Topic": [topic_filter],
                    "SubPoint": [point],
                    "Count": [str(count)],
                }
                listed.append({key: value for key, value in asked.items() if value != [""]})
    return Reply("ok", subscriptions=listed)


def put(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    """telemq extension: one message on one queue only (a backfill), at the command's QoS.

    Not routed, retained or journaled. The requester must be allowed to publish to the
    topic; another user's queue needs admin rights or a `queue` grant, and a queue that is
    not the requester's own session needs the topic to be one the requester (with RegSub
    and Publish it could get the message there anyway) and the queue's owner may read.
    """
    topics = command.all("Topic")
    if len(topics) != 1:
        raise CommandFailed(ReasonCode.TOPIC_ERROR, "Put takes exactly one Topic")
    topic = topics[0]
    problem = host.topic_limits.name_error(topic)
    if problem:
        raise CommandFailed(ReasonCode.TOPIC_ERROR, problem, Topic=topic[:256])
    qmgr = command.first("QMgrName") or host.qmgr_name
    if qmgr != host.qmgr_name:
        raise CommandFailed(
            ReasonCode.Q_MGR_NAME_ERROR,
            f"queue manager {qmgr!r} is not this broker ({host.qmgr_name!r})",
            QMgrName=qmgr,
        )
    queue = command.first("QName") or requester.client_id
    _check_queue_name(queue)
    if not host.may_publish(requester, topic):
        raise CommandFailed(
            ReasonCode.NOT_AUTHORIZED, f"not authorized to publish to {topic!r}", Topic=topic
        )
    owner = _queue_owner(queue, requester, host)
    reader = Requester(queue, owner, requester.sub_point)
    if queue != requester.client_id and not (
        host.may_subscribe(requester, topic) and host.may_subscribe(reader, topic)
    ):
        raise CommandFailed(
            ReasonCode.NOT_AUTHORIZED,
            f"queue {queue!r} is another client's and {topic!r} may not be subscribed to",
            QName=queue,
        )
    result = host.put_to_queue(requester, queue, topic, command.body, requester.qos)
    if result is PutResult.NO_QUEUE:
        raise CommandFailed(ReasonCode.Q_NAME_ERROR, f"no queue named {queue!r}", QName=queue)
    if result is PutResult.NOT_CONNECTED:
        raise CommandFailed(
            ReasonCode.BROKER_COMMAND_FAILED,
            f"queue {queue!r} has no client connected and QoS 0 messages are not queued"
            " (put at QoS 1 or 2)",
            QName=queue,
        )
    if result is PutResult.FULL:
        raise CommandFailed(
            ReasonCode.BROKER_COMMAND_FAILED,
            f"queue {queue!r} is full (limits.max_queued_messages)"
            if requester.qos
            else f"the client of queue {queue!r} is not reading (QoS 0 messages are dropped)",
            QName=queue,
        )
    return Reply("ok")


HANDLERS: dict[str, Callable[[Command, Requester, Registry, Host], Reply]] = {
    "RegSub": reg_sub,
    "DeregSub": dereg_sub,
    "ReqUpdate": req_update,
    "Publish": publish,
    "DeletePub": delete_pub,
    "ListSubs": list_subs,
    "Put": put,
}


def execute(
    command: Command, queue_topic: str, requester: Requester, registry: Registry, host: Host
) -> Reply:
    """Run one command received on `queue_topic`; never raises for bad input."""
    name = command.name
    handler = HANDLERS.get(name)
    if handler is None:
        return Reply(
            "error",
            [Reason(ReasonCode.PARM_SYNTAX_ERROR, {"Command": name})],
            message=f"unknown command {name!r} (known: {', '.join(HANDLERS)})",
        )
    if COMMAND_QUEUES[name] != queue_topic:
        return Reply(
            "error",
            [Reason(ReasonCode.INCORRECT_Q, {"Command": name})],
            message=f"{name} must be sent to {COMMAND_QUEUES[name]}",
        )
    try:
        return handler(command, requester, registry, host)
    except CommandFailed as failure:
        return Reply("error", [Reason(failure.code, failure.properties)], message=failure.message)
