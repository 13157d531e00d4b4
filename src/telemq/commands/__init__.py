"""The MQ publish/subscribe commands on MQTT: the `<psc>`/`<pscr>` codec and the handlers.

Theory of operation
-------------------
A command is an MQTT PUBLISH to `SYSTEM.BROKER.CONTROL.QUEUE` (RegSub, DeregSub,
ReqUpdate) or `SYSTEM.BROKER.DEFAULT.STREAM` (Publish, DeletePub); telemq adds ListSubs and Put
(a message on one queue only) on the control queue. The payload is
an MQ folder sequence (`codec`). `handlers.execute` validates it completely, then
applies it to the subscription registry, asking the broker (a `Host`) for
authorization, sessions and retained messages, and returns the `<pscr>` reply,
which the broker publishes to the reply topic.
"""

from .checks import subscription_attributes
from .codec import (
    Command,
    CommandSyntaxError,
    Mqmd,
    Reason,
    Reply,
    encode_command,
    encode_reply,
    parse_command,
    parse_reply,
    reply_correl_id,
)
from .handlers import execute
from .host import Host, PutResult, Requester
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
    "PutResult",
    "Reason",
    "ReasonCode",
    "Reply",
    "Requester",
    "encode_command",
    "encode_reply",
    "execute",
    "parse_command",
    "parse_reply",
    "reply_correl_id",
    "subscription_attributes",
]
