"""The command handlers: one per command, and `execute`, which runs the one a message names.

Theory of operation
-------------------
A command is an MQ folder sequence (`codec`) sent to one of two queues: the subscriber
commands RegSub, DeregSub and ReqUpdate (subscriber.py) and telemq's ListSubs and Put
(extensions.py) to the control queue, the publisher commands Publish and DeletePub
(publisher.py) to the default stream. `execute` checks the command's name and queue and
calls its handler, which validates the whole command (checks.py) before it changes anything
and returns the reply; a refusal (`CommandFailed`) becomes an error reply here, so
`execute` never raises for bad input. Handlers work on the `Registry` and ask the broker for
everything else through the small `Host` protocol (host.py), so they hold no I/O and can be
driven by the broker, the CLI's in-process API and tests alike.
"""

from __future__ import annotations

from collections.abc import Callable

from ..subscriptions import Registry
from .checks import CommandFailed
from .codec import Command, Reason, Reply
from .extensions import list_subs, put
from .host import Host, Requester
from .publisher import delete_pub, publish
from .reasons import CONTROL_QUEUE, DEFAULT_STREAM, ReasonCode
from .subscriber import dereg_sub, reg_sub, req_update

COMMAND_QUEUES = {
    "RegSub": CONTROL_QUEUE,
    "DeregSub": CONTROL_QUEUE,
    "ReqUpdate": CONTROL_QUEUE,
    "Publish": DEFAULT_STREAM,
    "DeletePub": DEFAULT_STREAM,
    "ListSubs": CONTROL_QUEUE,
    "Put": CONTROL_QUEUE,
}


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
