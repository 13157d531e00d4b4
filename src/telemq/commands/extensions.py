"""telemq's own commands beside MQ's: ListSubs and Put.

Theory of operation
-------------------
Both go to the control queue. ListSubs lists subscriptions with all their attributes, as
FullResp shows one: a user sees those it registered and those on its queues, an admin all of
them, and the proxy subscriptions of the network on request. Put places one message on one
queue only, as a backfill: not routed, retained or journaled, and only where the requester
could have had the message delivered through a subscription anyway.
"""

from __future__ import annotations

from collections.abc import Callable

from ..subscriptions import Registry
from .checks import CommandFailed, check_queue_name, queue_owner, subscription_attributes
from .codec import Command, Reply
from .host import Host, PutResult, Requester
from .reasons import ReasonCode

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
    listed = [subscription_attributes(s) for s in chosen]
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
    check_queue_name(queue)
    if not host.may_publish(requester, topic):
        raise CommandFailed(
            ReasonCode.NOT_AUTHORIZED, f"not authorized to publish to {topic!r}", Topic=topic
        )
    owner = queue_owner(queue, requester, host)
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
