"""Topics that are the broker's own: no client publishes there, whatever the ACL says.

Theory of operation
-------------------
`$SYS/` carries the broker's figures; `$link/` the control messages linked brokers send each
other (`$link/control`, only ever on a link's own connection); `$bridge/` and `$remote/`
name the network's sessions and queues; `$share/` starts a shared subscription's filter
(MQTT 5.0 §4.8.2), so no subscription can ask for a topic name of that form; `$sparkplug/`
holds the Sparkplug certificates the broker keeps (core/sparkplug.py). A PUBLISH, a
will or a retained message a client sends there could only mislead whoever reads them (an
anonymous `$SYS/broker/clients/connected` of 9999), so it is refused for every user,
administrators included (an administrator may read `$SYS`), as an ACL denial is: dropped
and counted. The bare roots (`$SYS` itself, which `$SYS/#` matches) are refused too.

One exception, as Mosquitto makes it: a bridge announces its own state on
`$SYS/broker/connection/<its client id>/state` (retained `1`, and `0` in its will), so a
client may publish that one topic for its own client id: a statement about itself that no
figure of the broker depends on.

What the broker itself publishes (`$SYS`, its bridges' notifications, in-process code and
the configured bridges' `in` rules) is trusted and does not come here. The router asks here
only for a topic that begins with `$`: one `startswith` per PUBLISH on its path.
"""

from __future__ import annotations

from typing import Final

RESERVED_PREFIXES: Final = ("$SYS/", "$link/", "$bridge/", "$remote/", "$share/", "$sparkplug/")
_ROOTS: Final = frozenset(prefix[:-1] for prefix in RESERVED_PREFIXES)
BRIDGE_STATE: Final = "$SYS/broker/connection/{}/state"  # Mosquitto's notification topic


def reserved_topic_problem(topic: str, client_id: str) -> str | None:
    """Why the client `client_id` may not publish to `topic` whatever the ACL says (a
    reserved prefix), or None when it may."""
    if not topic.startswith(RESERVED_PREFIXES) and topic not in _ROOTS:
        return None
    if client_id and topic == BRIDGE_STATE.format(client_id):
        return None
    return f"{topic.partition('/')[0]}/ topics are the broker's"
