"""The MQ publish/subscribe commands on MQTT: the `<psc>`/`<pscr>` codec and the handlers.

Theory of operation
-------------------
A command is an MQTT PUBLISH to `SYSTEM.BROKER.CONTROL.QUEUE` (RegSub, DeregSub,
ReqUpdate) or `SYSTEM.BROKER.DEFAULT.STREAM` (Publish, DeletePub) whose payload is
an MQ folder sequence (`codec`). `handlers.execute` validates it completely, then
applies it to the subscription registry, asking the broker (a `Host`) for
authorization, sessions and retained messages, and returns the `<pscr>` reply,
which the broker publishes to the reply topic.
"""

from .codec import (
    Command,
    CommandSyntaxError,
    Mqmd,
    Reason,
    Reply,
    encode_reply,
    parse_command,
    parse_reply,
)
from .handlers import Host, Requester, execute, subscription_attributes
from .reasons import COMMAND_TOPICS, CONTROL_QUEUE, DEFAULT_STREAM, RESPONSE_PREFIX, ReasonCode

__all__ = [
    "COMMAND_TOPICS",
    "CONTROL_QUEUE",
    "DEFAULT_STREAM",
    "RESPONSE_PREFIX",
    "Command",
    "CommandSyntaxError",
    "Host",
    "Mqmd",
    "Reason",
    "ReasonCode",
    "Reply",
    "Requester",
    "encode_reply",
    "execute",
    "parse_command",
    "parse_reply",
    "subscription_attributes",
]
