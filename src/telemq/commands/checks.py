"""What the command handlers check before they change anything, and how a refusal ends one.

Theory of operation
-------------------
Each handler validates the whole command first and only then changes anything, so an error
reply means nothing was processed (MQ rule); a warning reply means the rest was processed.
A check that refuses raises `CommandFailed`, which `handlers.execute` turns into the error
reply. The checks here are those of properties several commands share: the options a
command may name, the subscription point, the queue and identity it addresses and who may
use them, the filter and the topics, and whether another user's subscription may be
addressed. `subscription_attributes` is a subscription as FullResp and ListSubs show it.
"""

from __future__ import annotations

from ..filters import Filter, FilterError, compile_filter
from ..subscriptions import RESERVED_QUEUE_PREFIXES, Identity, Subscription
from .codec import Command
from .host import Host, Requester
from .reasons import ReasonCode


class CommandFailed(Exception):
    """Ends a handler with an error reply (nothing processed)."""

    def __init__(self, code: ReasonCode, message: str = "", **properties: str) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
        self.properties = properties


def command_options(
    command: Command, name: str, allowed: frozenset[str], code: ReasonCode
) -> list[str]:
    """The values of option property `name` (RegOpt, PubOpt, DelOpt), each one `allowed`;
    "None" beside others is dropped."""
    values = command.all(name)
    for value in values:
        if value not in allowed:
            raise CommandFailed(code, f"unknown {name} {value!r}", **{name: value})
    if len(values) > 1:
        values = [v for v in values if v != "None"]
    return values


def declared_sub_point(command: Command, requester: Requester, host: Host) -> str:
    sub_point = command.first("SubPoint", requester.sub_point)
    if not host.sub_point_declared(sub_point):
        raise CommandFailed(
            ReasonCode.SUBSCRIPTION_POINT_ERR,
            f"subscription point {sub_point!r} is not declared",
            SubPoint=sub_point,
        )
    return sub_point


def check_queue_name(queue: str) -> None:
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


def command_identity(command: Command, requester: Requester, host: Host, correl: bool) -> Identity:
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
    check_queue_name(queue)
    correl_id = ""
    if correl:
        if command.mqmd.correl_is_zero():
            raise CommandFailed(
                ReasonCode.CORREL_ID_ERROR, "CorrelAsId needs a non-zero <mqmd><CorrelId>"
            )
        correl_id = command.mqmd.correl_id
    return Identity(qmgr, queue, correl_id, remote)


def queue_owner(queue: str, requester: Requester, host: Host) -> str:
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


def command_filter(command: Command, max_size: int | None = None) -> tuple[str, Filter | None]:
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


def check_filters(topics: list[str], host: Host) -> None:
    if not topics:
        raise CommandFailed(ReasonCode.TOPIC_ERROR, "the <Topic> property is missing")
    for topic in topics:
        problem = host.topic_limits.filter_error(topic)
        if problem:
            raise CommandFailed(ReasonCode.TOPIC_ERROR, problem, Topic=topic[:256])


def subscription_attributes(subscription: Subscription) -> dict[str, list[str]]:
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


def may_address(subscription: Subscription, requester: Requester) -> bool:
    """RegSub: the owner, or anyone for a VariableUserId subscription."""
    return subscription.owner == requester.user_id or "VariableUserId" in subscription.options


def check_addressable(subscription: Subscription, requester: Requester, options: list[str]) -> None:
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
