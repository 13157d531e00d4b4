"""The broker side of the MQ commands: a `commands.Host` over the core's rooms.

A command message (a PUBLISH to `SYSTEM.BROKER.*`) is parsed, authorized and executed by
`commands`, which changes the registry itself and asks the host for everything else. The
host asks the rooms that own the state (`CoreRooms`: sessions, subscriptions, router,
retained messages, hooks) and reads the network through `Network`, which the links room
implements; it never sees the broker. The reply is published once the command's effects
are durable.

MQTT 5.0 (docs/mq.md, "MQTT 5.0"): a command PUBLISH's Response Topic and Correlation Data
stand for `<mqmd>`'s ReplyToQ and CorrelId when the command does not give those; the reply
carries the command's Correlation Data (else its CorrelId, as bytes), says what it is
(Content Type `application/xml` or `application/json`, Payload Format Indicator 1), and
goes to the Response Topic. 3.1.1 subscribers of the reply get its payload only.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol

from ...commands import (
    CONTROL_QUEUE,
    RESPONSE_PREFIX,
    Command,
    CommandSyntaxError,
    Mqmd,
    PutResult,
    Reason,
    ReasonCode,
    Reply,
    Requester,
    encode_reply,
    execute,
    parse_command,
)
from ...protocol import TopicLimits
from ...protocol.properties import message_properties
from ...protocol.property_table import Properties
from ...subscriptions import Registry, Subscription
from ..core.command_puts import publish_as, put_to_queue
from ..security.acl import Action
from ..security.reserved import reserved_topic_problem

if TYPE_CHECKING:
    from ..core.rooms import CoreRooms
    from ..core.session import Client
    from ..settings.config import LimitsConfig

log = logging.getLogger("telemq.broker")


class Network(Protocol):
    """What the MQ commands read of the broker's network (the links room answers)."""

    def known(self, name: str) -> bool:
        """Is `name` a broker of the network (for QMgrName)?"""
        ...

    def proxies_asked(self) -> list[tuple[str, str, str, int]]:
        """The proxy subscriptions this broker asked of its neighbours (ListSubs)."""
        ...

    def delete_retained_everywhere(self, sub_point: str, topic: str) -> None:
        """DeletePub without DelOpt Local: at every broker of the network too."""
        ...


class CommandHost:
    """Implements `commands.Host` for one broker; the wiring `attach`es the rooms once they
    exist (the router, which runs commands through this host, is one of them)."""

    def __init__(self, qmgr_name: str, topic_limits: TopicLimits, limits: LimitsConfig) -> None:
        self.qmgr_name = qmgr_name
        self.topic_limits = topic_limits
        self.max_filter_size = limits.max_filter_size
        self.max_filter_size_per_user = limits.max_filter_size_per_user
        self._rooms: CoreRooms
        self._network: Network

    def attach(self, rooms: CoreRooms, network: Network) -> None:
        self._rooms = rooms
        self._network = network

    def run_for(
        self,
        client: Client,
        queue_topic: str,
        payload: bytes,
        qos: int,
        properties: Properties | None = None,
    ) -> None:
        """A command a client published (`properties`: its PUBLISH's, at MQTT 5.0)."""
        requester = Requester(client.client_id, client.user_id, client.listener.sub_point, qos)
        self.run_as(requester, queue_topic, payload, properties)

    def run_as(
        self,
        requester: Requester,
        queue_topic: str,
        payload: bytes,
        properties: Properties | None = None,
    ) -> None:
        """Execute an MQ command; its reply is published once its effects are durable."""
        rooms = self._rooms
        rooms.stats.commands += 1
        reply, command = run_command(self, queue_topic, payload, requester, properties)
        if not wants_reply(reply, command):
            return
        client_id = requester.client_id
        topic = reply_topic(command, client_id)
        problem = self.topic_limits.name_error(topic)
        if problem is not None:
            log.info("client %r: no reply to %r: %s", client_id, topic, problem)
            return
        if topic != RESPONSE_PREFIX + client_id and not self.may_publish(requester, topic):
            # The requester chooses the reply topic: it must not be a way to write anywhere.
            log.info("client %r: no reply to %r: not authorized", client_id, topic)
            return
        form = reply_form(command, payload)
        body = encode_reply(reply, command, form)
        properties_out = reply_properties(command, properties, form)
        router, qos, sub_point = rooms.router, requester.qos, requester.sub_point
        rooms.committer.after(
            lambda: router.publish(
                topic, body, qos, False, sub_point, journal=False, properties=properties_out
            )
        )
        rooms.committer.schedule()

    @property
    def registry(self) -> Registry:
        return self._rooms.registry

    def now(self) -> float:
        return time.time()

    def broker_known(self, name: str) -> bool:
        return self._network.known(name)

    def proxies_asked(self) -> list[tuple[str, str, str, int]]:
        return self._network.proxies_asked()

    def sub_point_declared(self, name: str) -> bool:
        return name in self._rooms.sub_points

    def may(self, action: Action, requester: Requester, topic: str) -> bool:
        hooks = self._rooms.hooks
        return hooks.may(action, topic, requester.user_id, requester.client_id)

    def may_subscribe(self, requester: Requester, topic_filter: str) -> bool:
        return self.may(Action.SUBSCRIBE, requester, topic_filter)

    def may_publish(self, requester: Requester, topic: str) -> bool:
        """The publish check of a Publish, DeletePub or Put topic and of a reply topic: the
        broker's own prefixes (security/reserved.py) are refused whatever the hooks say."""
        if reserved_topic_problem(topic, "") is not None:  # "": no bridge state by command
            return False
        return self.may(Action.PUBLISH, requester, topic)

    def ensure_queue(self, queue: str, owner: str) -> None:
        self._rooms.sessions.ensure_queue(queue, owner)

    def queue_owner(self, queue: str) -> str | None:
        session = self._rooms.sessions.by_id.get(queue)
        return None if session is None else session.user_id

    def may_use_queue(self, requester: Requester, queue: str) -> bool:
        hooks = self._rooms.hooks
        return hooks.may_use_queue(requester.user_id, requester.client_id, queue)

    def is_admin(self, requester: Requester) -> bool:
        return self._rooms.hooks.is_admin(requester.user_id)

    def reserve_subscriptions(self, queue: str, count: int) -> str | None:
        return self._rooms.subscriptions.quota_problem(queue, count)

    def subscription_changed(self, subscription: Subscription) -> None:
        self._rooms.subscriptions.saved(subscription)

    def subscription_removed(self, subscription: Subscription) -> None:
        self._rooms.subscriptions.removed(subscription)

    def send_retained(self, subscription: Subscription) -> int:
        return self._rooms.subscriptions.send_retained(subscription)

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
        publish_as(self._rooms, requester, topic, body, retain, exclude_queue, expiry, local)

    def retained_topics(self, sub_point: str, topic_filter: str) -> list[str]:
        return [m.topic for m in self._rooms.retained.matching(sub_point, topic_filter)]

    def delete_retained(self, sub_point: str, topic: str, local: bool = False) -> bool:
        deleted = self._rooms.retained.delete(sub_point, topic)
        if not local:
            self._network.delete_retained_everywhere(sub_point, topic)
        return deleted

    def put_to_queue(
        self, requester: Requester, queue: str, topic: str, body: bytes, qos: int
    ) -> PutResult:
        return put_to_queue(self._rooms, requester, queue, topic, body, qos)


def run_command(
    host: CommandHost,
    queue_topic: str,
    payload: bytes,
    requester: Requester,
    properties: Properties | None = None,
) -> tuple[Reply, Command | None]:
    """Parse and execute one command message; malformed input gets 3097."""
    try:
        command = parse_command(payload)
        mqmd_from_properties(command.mqmd, properties)
    except CommandSyntaxError as error:
        # With a readable <mqmd> (or 5.0 properties) the reply still goes where asked,
        # with the CorrelId.
        mqmd = error.mqmd
        if mqmd is None and properties is not None:
            mqmd = Mqmd()
            mqmd_from_properties(mqmd, properties)
        unread = None if mqmd is None else Command(psc={}, mqmd=mqmd)
        return (
            Reply("error", [Reason(ReasonCode.PARM_SYNTAX_ERROR)], message=str(error)),
            unread,
        )
    if not host.may(Action.COMMAND, requester, queue_topic):
        return (
            Reply(
                "error",
                [Reason(ReasonCode.NOT_AUTHORIZED, {"QName": queue_topic})],
                message=f"not authorized to put commands to {queue_topic}",
            ),
            command,
        )
    reply = execute(command, queue_topic, requester, host.registry, host)
    if reply.completion != "ok":
        log.info(
            "command %s from %r: %s %s %s",
            command.name,
            requester.client_id,
            reply.completion,
            [r.code for r in reply.reasons],
            reply.message,
        )
    return reply, command


def reply_topic(command: Command | None, client_id: str) -> str:
    if command is not None and command.mqmd.reply_to_q:
        return command.mqmd.reply_to_q
    return RESPONSE_PREFIX + client_id


def mqmd_from_properties(mqmd: Mqmd, properties: Properties | None) -> None:
    """MQTT 5.0: a Response Topic and Correlation Data stand for ReplyToQ and CorrelId
    when `<mqmd>` does not give them (the folder wins when it does)."""
    if properties is None:
        return
    if not mqmd.reply_to_q and properties.response_topic:
        mqmd.reply_to_q = properties.response_topic
    if not mqmd.correl_id and properties.correlation_data:
        mqmd.correl_id = properties.correlation_data.hex().upper()


def reply_form(command: Command | None, payload: bytes) -> str:
    """The form of the reply, the request's: "xml" or "json"."""
    if command is not None:
        return command.form
    return "json" if payload.lstrip()[:1] == b"{" else "xml"


def reply_payload(reply: Reply, command: Command | None, payload: bytes) -> bytes:
    return encode_reply(reply, command, reply_form(command, payload))


def reply_properties(command: Command | None, properties: Properties | None, form: str) -> bytes:
    """A reply's MQTT 5.0 properties: the command's Correlation Data (or its CorrelId, as
    bytes), and what the payload is."""
    correlation = properties.correlation_data if properties is not None else None
    if correlation is None and command is not None and not command.mqmd.correl_is_zero():
        correlation = bytes.fromhex(command.mqmd.correl_id)
    return message_properties(
        Properties(
            payload_format_indicator=1,
            content_type=f"application/{form}",
            correlation_data=correlation,
        )
    )


def wants_reply(reply: Reply, command: Command | None) -> bool:
    """A request always gets a reply; a datagram only on warning or error (design §6)."""
    if command is None or command.mqmd.msg_type != "datagram":
        return True
    return reply.completion != "ok"


__all__ = ["CONTROL_QUEUE", "CommandHost", "reply_payload", "reply_topic", "run_command"]
