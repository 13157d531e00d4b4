"""Queues on other brokers: the deliveries of a RegSub whose `QMgrName` names another broker.

Theory of operation
-------------------
As in IBM MQ, a subscription lives where it was registered and its publications are put to
a queue that may live elsewhere (docs/network.md §7). A RegSub at A for queue Q of broker C
is a subscription of A like any other: it asks the neighbours for proxies, so publications
made anywhere reach A, and A's registry matches them, content filter included. Its
deliveries go to a session of A named `$remote/C/Q` (`Identity.delivery_queue`): a
*stand-in*, persistent like a queue and owned by the user whose RegSub made it, whose
`DeliveryTarget` is a `RemoteQueueTarget`. Offered a delivery, the target moves it onto the
queue of the link toward C (`Topology.next_hop`) with an envelope naming the destination
(`telemq-to: C/Q`) and the stand-in's owner (`telemq-owner`); the enqueue there and the
deletion from the stand-in (`Deliveries.to_target`) go in one pending batch, so the move is
atomic. While no connected link leads to C, or the link's queue is full, the delivery waits
in the stand-in; the links room pumps every stand-in when the topology changes (`pump_all`),
and every new delivery pumps its own.

A copy with `telemq-to` that arrives over a link is neither routed, retained nor journaled
(`deliver_for` gives the router a `Deliver` for it). At C it is put on queue Q, as MQ Put
would, when its owner may use Q: Q does not exist yet (it is made, owned by that user),
belongs to that user, or the user is an administrator or has a `queue` grant for Q at C;
otherwise it is dropped, counted and logged. At a broker in between it joins the transit
session `$remote/C` (the network's own: no user's stand-in, so it claims no queue), with its
envelope (path extended) as the delivery's own properties, and goes on from there the same
way. So every hop is the ordinary durable QoS 1/2 exchange between
persistent sessions that routed copies make, and a copy never goes to a broker already on
its path (which a tree only allows while the topology is changing).

CorrelAsId: the subscription's CorrelId is the copy's own Correlation Data (`Delivery.
properties`), which the link's pump sends in place of the message's; it arrives as the
message's Correlation Data and is delivered so at C.

The room owns the stand-ins it made targets for and the envelopes of new copies; sessions
are the `Sessions` room's, the topology the links room's.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...network.envelope import LinkInfo, extend, sealed_envelope, split
from ...subscriptions import RESERVED_QUEUE_PREFIXES
from ..core.message import Delivery, DeliveryTarget, Message
from ..core.router import Deliver
from ..core.session import Session
from ..core.sessions import LINK_OWNER, LINK_PREFIX, REMOTE_PREFIX, Sessions

if TYPE_CHECKING:
    from ..core.committer import Committer
    from ..core.delivery import Deliveries
    from ..core.stats import BrokerStats

log = logging.getLogger("telemq.broker")

ENVELOPE_CACHE = 1024  # envelopes of new copies and of copies passed on, per room
REFUSALS_LOGGED = 1024  # (queue, owner) pairs whose refusal was logged


class RemoteQueueTarget:
    """Where the deliveries of stand-in `$remote/C/Q` (or transit session `$remote/C`) go:
    toward broker C (module docstring)."""

    __slots__ = ("_room", "broker", "session", "to")

    def __init__(self, room: RemoteQueues, session: Session) -> None:
        self._room = room
        self.session = session
        self.to = session.client_id[len(REMOTE_PREFIX) :]  # "C/Q", or "C" for transit
        self.broker = self.to.split("/", 1)[0]

    def take(self, message: Message, qos: int, retain: bool, properties: bytes) -> bool:
        return self._room.forward(self, message, qos, retain, properties)


class RemoteQueues:
    """The stand-ins of this broker and the copies for queues that cross it."""

    def __init__(
        self,
        own: str,
        next_hop: Callable[[str], str | None],
        sessions: Sessions,
        deliveries: Deliveries,
        committer: Committer,
        may_use_queue: Callable[[str, str], bool],
        stats: BrokerStats,
    ) -> None:
        self._own = own
        self._next_hop = next_hop
        self._sessions = sessions
        self._deliveries = deliveries
        self._committer = committer
        self._may_use_queue = may_use_queue  # (user, queue)
        self._stats = stats
        self._stand_ins: dict[str, Session] = {}
        # (sub point, to, owner, client id, user id) of new copies, and the envelopes of
        # copies passed on.
        self._new_envelopes: dict[tuple[str, str, str, str, str], bytes] = {}
        self._onward: dict[LinkInfo, bytes] = {}
        self._refusals_logged: set[tuple[str, str]] = set()
        sessions.queue_targets[REMOTE_PREFIX] = self._target_for

    def _target_for(self, session: Session) -> DeliveryTarget:
        self._stand_ins[session.client_id] = session
        return RemoteQueueTarget(self, session)

    def pump_all(self) -> None:
        """The topology changed: what waits in a stand-in may have a way now."""
        for session in list(self._stand_ins.values()):
            if session.queue:
                self._deliveries.pump(session)

    def queued(self) -> int:
        """Deliveries waiting in this broker's stand-ins."""
        return sum(len(session.queue) for session in self._stand_ins.values())

    # -- leaving: a stand-in's delivery onto the link toward its broker --------------

    def forward(
        self, target: RemoteQueueTarget, message: Message, qos: int, retain: bool, extra: bytes
    ) -> bool:
        """A stand-in's delivery onto the next hop's link queue; False: it waits."""
        hop = self._next_hop(target.broker)
        if hop is None:
            return False
        link = self._sessions.by_id.get(LINK_PREFIX + hop)
        if link is None:
            return False
        info, _ = split(extra)
        if info is not None:  # passed on from another broker: its envelope is ready
            if hop in info.path:
                return False  # never back where it has been: wait for the topology to settle
            properties = extra
        else:  # made here: its own properties (a CorrelId) stay first, for the pump
            properties = extra + self._new_envelope(message, target)
        deliveries = self._deliveries
        if qos == 0:
            deliveries.send_qos0_to(link, message, retain, properties)
        elif deliveries.enqueue(link, message, qos, retain, True, False, properties) is None:
            return False  # the link's queue is full: wait here
        else:
            deliveries.pump(link)
            self._committer.schedule()
        link.counted().forwarded += 1
        return True

    def _new_envelope(self, message: Message, target: RemoteQueueTarget) -> bytes:
        """The envelope of a copy of `message`, made here, for the queue of `target`: with
        the publisher's identity, which the queue's message keeps at the far broker."""
        owner = target.session.user_id
        sub_point = message.sub_point
        key = (sub_point, target.to, owner, message.client_id, message.user_id)
        envelope = self._new_envelopes.get(key)
        if envelope is None:
            if len(self._new_envelopes) >= ENVELOPE_CACHE:
                self._new_envelopes.clear()
            info = LinkInfo(
                (self._own,),
                sub_point,
                target.to,
                owner,
                client_id=message.client_id,
                user_id=message.user_id,
            )
            envelope = sealed_envelope(info)
            self._new_envelopes[key] = envelope
        return envelope

    # -- arriving: a copy with telemq-to ------------------------------------------------

    def deliver_for(self, info: LinkInfo) -> Deliver:
        """What the router does with a copy whose envelope is `info` (`info.to` set)."""
        return functools.partial(self._arrive, info)

    def _arrive(
        self, info: LinkInfo, message: Message, hand_off_now: bool
    ) -> list[tuple[Session, Delivery]]:
        broker, queue = info.to.split("/", 1)
        extra = b""
        if broker == self._own:
            session = self._queue_here(queue, info.owner)
            if session is None:
                return []
        else:  # passing through: one transit session per broker, the network's own
            session = self._sessions.ensure_queue(REMOTE_PREFIX + broker, LINK_OWNER)
            extra = self._onward_envelope(info)
        deliveries = self._deliveries
        retain = message.retain
        if message.qos == 0:
            deliveries.send_qos0_to(session, message, retain, extra)
            return []
        delivery = deliveries.enqueue(
            session, message, message.qos, retain, session.persistent, False, extra
        )
        if delivery is None:
            return []  # the queue is full: dropped and counted, as for a routed copy
        if hand_off_now:
            deliveries.pump(session)
            return []
        return [(session, delivery)]

    def _onward_envelope(self, info: LinkInfo) -> bytes:
        envelope = self._onward.get(info)
        if envelope is None:
            if len(self._onward) >= ENVELOPE_CACHE:
                self._onward.clear()
            envelope = self._onward[info] = sealed_envelope(extend(info, self._own))
        return envelope

    def _queue_here(self, queue: str, owner: str) -> Session | None:
        """Queue `queue` of this broker, if the copy's owner may put to it (made for the
        owner when it does not exist); None: refused, counted and logged."""
        if queue.startswith(RESERVED_QUEUE_PREFIXES):
            self._refuse(queue, owner, "the name is one the network keeps")
            return None
        session = self._sessions.by_id.get(queue)
        if session is None:
            return self._sessions.ensure_queue(queue, owner)
        if session.user_id == owner or self._may_use_queue(owner, queue):
            return session
        self._refuse(
            queue,
            owner,
            "the queue belongs to another user (an administrator or a queue grant is needed)",
        )
        return None

    def _refuse(self, queue: str, owner: str, why: str) -> None:
        self._stats.messages_dropped += 1
        key = (queue, owner)
        if key not in self._refusals_logged:
            if len(self._refusals_logged) >= REFUSALS_LOGGED:
                self._refusals_logged.clear()
            self._refusals_logged.add(key)
            log.warning(
                "a publication for queue %r of user %r came over a link and is dropped: %s",
                queue,
                owner,
                why,
            )
