"""The publisher commands of MQ publish/subscribe: Publish and DeletePub.

Theory of operation
-------------------
Both go to the default stream. Publish publishes the command's body on each of its topics,
as an MQTT PUBLISH would (retained with RetainPub, to this broker's subscribers alone with
Local, not to the publisher's own queue with OtherSubsOnly). DeletePub deletes retained
publications, those of a wildcard topic one by one. Authorization is per topic: a topic the
requester may not publish to is a warning, and the rest is processed.
"""

from __future__ import annotations

from ..protocol.topics import is_wildcard_filter
from ..subscriptions import Registry
from .checks import CommandFailed, check_filters, command_options, declared_sub_point
from .codec import Command, Reason, Reply
from .host import Host, Requester
from .reasons import ReasonCode

PUB_OPTIONS = frozenset({"None", "RetainPub", "OtherSubsOnly", "CorrelAsId", "Local", "NoReg"})
DEL_OPTIONS = frozenset({"None", "Local"})


def publish(command: Command, requester: Requester, registry: Registry, host: Host) -> Reply:
    options = command_options(command, "PubOpt", PUB_OPTIONS, ReasonCode.PUB_OPTIONS_ERROR)
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
    local = "Local" in command_options(command, "DelOpt", DEL_OPTIONS, ReasonCode.DEL_OPTIONS_ERROR)
    topics = command.all("Topic")
    check_filters(topics, host)
    sub_point = declared_sub_point(command, requester, host)
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
