"""Wills: the message a client leaves to be published when its connection ends badly.

Theory of operation
-------------------
A will is published when a connection ends without a DISCONNECT of reason 0 (MQTT 5.0 lets
a client keep its will with DISCONNECT 0x04, and any error reason keeps it too). It goes
through the hooks' authorization like any PUBLISH, and then through the router.

MQTT 5.0 adds the Will Delay Interval (§3.1.3.2.2): the will waits that long, unless the
session ends first (then it goes at once), and is dropped when a new connection takes the
session before the delay is over. `Wills` owns the delayed wills, one timer per client id;
`Sessions` tells it when a connection ends (`connection_ended`), when a session is taken
by a new connection (`cancel`) and when a session ends (`session_ended`). A delayed will is
kept in memory only: a broker that stops drops it (as Mosquitto does).

The will's properties (content type, response topic, correlation data, user properties,
message expiry, payload format) go with its message, as a PUBLISH's would. With
`[sparkplug] aware` on, a Sparkplug NDEATH will gets the time it is published as its
timestamp (sparkplug.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ...protocol.packets import Will
from ..security.acl import Action
from ..security.hooks import Hooks
from .committer import Committer
from .message import Message
from .router import Router, now_us
from .sparkplug import SparkplugAwareness

if TYPE_CHECKING:
    from .stats import BrokerStats

log = logging.getLogger("telemq.broker")


class _Pending:
    """A will waiting for its delay: what publishing it needs once the client is gone."""

    __slots__ = ("client_id", "sub_point", "timer", "user_id", "will")

    def __init__(self, will: Will, client_id: str, user_id: str, sub_point: str) -> None:
        self.will = will
        self.client_id = client_id
        self.user_id = user_id
        self.sub_point = sub_point
        self.timer: asyncio.TimerHandle | None = None


class Wills:
    """Publishes wills, at once or after their delay (see module docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        hooks: Hooks,
        stats: BrokerStats,
        router: Router,
        committer: Committer,
        sparkplug: SparkplugAwareness | None = None,
    ) -> None:
        self._loop = loop
        self._sparkplug = sparkplug  # [sparkplug] aware: an NDEATH's timestamp is replaced
        self._hooks = hooks
        self._stats = stats
        self._router = router
        self._committer = committer
        self._delayed: dict[str, _Pending] = {}

    def __len__(self) -> int:
        """Wills waiting for their delay."""
        return len(self._delayed)

    def connection_ended(
        self, will: Will, client_id: str, user_id: str, sub_point: str, session_kept: float
    ) -> None:
        """A connection ended with its will standing; the session lasts `session_kept`
        seconds more (0: it ended with the connection)."""
        pending = _Pending(will, client_id, user_id, sub_point)
        props = will.properties
        delay = min(props.will_delay_interval or 0, session_kept) if props is not None else 0
        if delay <= 0:
            self._publish(pending)
            return
        self.cancel(client_id)  # at most one per client id: the newest connection's
        pending.timer = self._loop.call_later(delay, self._fire, client_id)
        self._delayed[client_id] = pending

    def cancel(self, client_id: str) -> None:
        """A new connection took the session in time: its will is not published."""
        pending = self._delayed.pop(client_id, None)
        if pending is not None and pending.timer is not None:
            pending.timer.cancel()

    def session_ended(self, client_id: str) -> None:
        """The session ended before the delay was over: the will goes now."""
        pending = self._delayed.pop(client_id, None)
        if pending is not None:
            if pending.timer is not None:
                pending.timer.cancel()
            self._publish(pending)

    def stop(self) -> None:
        """The broker stops: delayed wills are dropped (see module docstring)."""
        for pending in self._delayed.values():
            if pending.timer is not None:
                pending.timer.cancel()
        self._delayed.clear()

    def _fire(self, client_id: str) -> None:
        pending = self._delayed.pop(client_id, None)
        if pending is not None:
            self._publish(pending)

    def _publish(self, pending: _Pending) -> None:
        will = pending.will
        if not self._hooks.may(Action.PUBLISH, will.topic, pending.user_id, pending.client_id):
            self._stats.publish_denied += 1
            log.info("client %r: will to %r denied", pending.client_id, will.topic)
            return
        payload = will.payload
        if self._sparkplug is not None:
            payload = self._sparkplug.will_payload(will.topic, payload)
        message = Message(
            will.topic,
            payload,
            will.qos,
            will.retain,
            pending.sub_point,
            pending.client_id,
            pending.user_id,
            now_us(),
        )
        if will.properties is not None:
            message.take_properties(will.properties)
        self._router.accept(message, hand_off_now=True)
        self._committer.schedule()
