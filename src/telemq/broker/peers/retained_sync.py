"""Retained publications across a network of brokers: answers to new proxy subscriptions,
and MQ DeletePub reaching every broker.

Theory of operation
-------------------
A live retained publication crosses links like any other (proxies have Retain As
Published), and every broker it reaches keeps it in its retained store. What a new
subscription needs is what was retained *before* it: so a broker that gets a new proxy
subscription from a neighbour (docs/network.md §5) answers with the matching retained
messages of its own store, except those made on that neighbour's side of the tree (it has
them, or will get them from there) and those whose scope is this broker (an MQ Publish with
PubOpt Local: `Message.local_only`, kept with the retained record across restarts). Each
goes into the link session's queue as a **sync copy**: RETAIN set, at least QoS 1 (it must
not be lost to a busy link), its envelope tagged `telemq-sync: <sp> <filter>`, in order
with the live copies queued after it.

A broker that receives a sync copy (links.py, `Message.sync`) keeps and passes it on only
if it is news: when its store holds no retained message on that topic, or a different one.
Then it is routed like a publication from the network, without a journal row (it was
journaled where it was made): local subscribers get it with RETAIN set, as a retained
message for their subscription, and proxies of other neighbours carry it on, still a sync
copy. A copy the store already holds stops there, so a subscriber gets each retained
message once, from the nearest broker that had it. A broker asks a neighbour only for a
pair it did not ask for before, and answers from its store at once: the far brokers'
answers reach the new subscriber later, by routing, as they arrive.

DeletePub without `DelOpt Local` deletes the retained message here and puts a
`delete-retained` control message into every link session's queue but the one it came by:
stored like a QoS 1 publication, so it crosses outages and restarts, and in order with the
publications queued before it. Each broker deletes its copy and passes the message on, so it
reaches the whole tree once.

Known limit (documented in network.md): a retained message deleted by an MQTT publication
with an empty payload while no proxy carried it elsewhere stays at the brokers that hold it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...network.control import CONTROL_TOPIC, DeleteRetained, encode
from ...network.envelope import LinkInfo, sealed_envelope, sync_tag
from ...subscriptions import LINK_QUEUE_PREFIX
from ..core.committer import Committer
from ..core.delivery import Deliveries
from ..core.message import Message
from ..core.retained import RetainedMessages
from ..core.router import now_us
from ..core.session import Session

log = logging.getLogger("telemq.broker")


class RetainedSync:
    """See the module docstring. `next_hop(broker)`: the link that broker is reached by;
    `links()`: the names of the configured links."""

    def __init__(
        self,
        own: str,
        retained: RetainedMessages,
        deliveries: Deliveries,
        sessions: dict[str, Session],
        committer: Committer,
        next_hop: Callable[[str], str | None],
        links: Callable[[], list[str]],
    ) -> None:
        self._own = own
        self._retained = retained
        self._deliveries = deliveries
        self._sessions = sessions  # owned by the Sessions room: read only here
        self._committer = committer
        self._next_hop = next_hop
        self._links = links

    def answer(self, neighbour: str, sub_point: str, topic_filter: str) -> int:
        """Queue the retained messages a new proxy of `neighbour` matches, as sync copies;
        returns how many."""
        session = self._sessions.get(LINK_QUEUE_PREFIX + neighbour)
        if session is None:
            return 0
        tag = sync_tag(sub_point, topic_filter)
        deliveries = self._deliveries
        sent = 0
        for message in self._retained.matching(sub_point, topic_filter):
            if message.local_only:
                continue  # PubOpt Local: its retained copy stays here
            origin = message.origin or self._own
            if origin != self._own and self._next_hop(origin) == neighbour:
                continue  # made on the neighbour's side
            path = (self._own,) if origin == self._own else (origin, self._own)
            info = LinkInfo(
                path, sub_point, sync=tag, client_id=message.client_id, user_id=message.user_id
            )
            envelope = sealed_envelope(info)
            queued = deliveries.enqueue(
                session, message, message.qos or 1, True, session.persistent, False, envelope
            )
            sent += queued is not None
        if sent:
            log.debug("link %r: %d retained messages for proxy %r", neighbour, sent, topic_filter)
            deliveries.pump(session)
            self._committer.schedule()
        return sent

    def is_news(self, message: Message) -> bool:
        """Whether a sync copy tells this broker something: its store holds no retained
        message on the topic, or another one."""
        held = self._retained.get(message.sub_point, message.topic)
        return (
            held is None or held.payload != message.payload or held.properties != message.properties
        )

    def delete_everywhere(
        self, sub_point: str, topic: str, origin: str = "", came_by: str = ""
    ) -> None:
        """MQ DeletePub without `DelOpt Local`, made here (`origin` "") or passed on by the
        link `came_by`: to every other link, durably (see the module docstring)."""
        payload = encode(DeleteRetained(sub_point, topic, origin or self._own))
        message = Message(CONTROL_TOPIC, payload, 1, False, "", "", "", now_us())
        deliveries = self._deliveries
        queued = False
        for name in self._links():
            session = self._sessions.get(LINK_QUEUE_PREFIX + name)
            if name == came_by or session is None:
                continue
            delivery = deliveries.enqueue(session, message, 1, False, session.persistent, False)
            if delivery is not None:
                deliveries.pump(session)
                queued = True
        if queued:
            self._committer.schedule()
