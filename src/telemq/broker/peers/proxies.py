"""Proxy subscriptions: what this broker asks of each neighbour, and what they ask of it.

Theory of operation
-------------------
A broker asks each neighbour for the `(sub point, filter)` pairs its global subscriptions
need, and those its other neighbours asked it for (docs/network.md §5); `ProxyTable`
(network/proxies.py) counts them, fed by every subscription change through the
`SubscriptionListener` seam. What a neighbour asks of this broker is a subscription of the
link's session `$link/<neighbour>`, stored with it, matched like any other, delivering at
QoS 2 with Retain As Published and no content filter (filters run at the subscriber's
broker).

The changes travel as control messages on the link, in order: a whole `sync` at every
(re)connection, then `add` and `remove`. The receiver of a `sync` keeps what it lists and
removes the rest of that neighbour's proxies (mark and sweep), so whatever was lost with a
connection, the next one leaves exactly the current set. The links room (links.py) owns the
connections; this room owns the table and the proxies' side of the registry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from ...network.control import ProxyChange, Sync, sync_parts
from ...network.proxies import Change, ProxyTable, proxy_pair
from ...protocol import TopicLimits
from ...subscriptions import LINK_QUEUE_PREFIX, Identity, Registry, Subscription
from ..core.sessions import LINK_OWNER
from ..core.subscribe import SubscriptionManager

log = logging.getLogger("telemq.broker")


class ProxySubscriptions:
    """The proxy subscriptions of this broker's links (see module docstring). `send` puts a
    control message on a neighbour's link if it is up (False: it is not)."""

    def __init__(
        self,
        own: str,
        neighbours: Iterable[str],
        registry: Registry,
        subscriptions: SubscriptionManager,
        sub_points: set[str],
        topic_limits: TopicLimits,
        send: Callable[[str, Sync | ProxyChange], bool],
        answer: Callable[[str, str, str], object] | None = None,
    ) -> None:
        """`answer(neighbour, sub_point, filter)`: called for each new proxy a neighbour
        asks for (retained_sync.py sends it the matching retained messages)."""
        self._own = own
        self._registry = registry
        self._subscriptions = subscriptions
        self._sub_points = sub_points
        self._topic_limits = topic_limits
        self._send = send
        self._answer = answer
        self.table = ProxyTable(neighbours)
        self._incoming: dict[str, list[tuple[str, str]]] = {}  # a `sync` being received

    def start(self) -> None:
        """Count the restored subscriptions, then hear of every change."""
        for subscription in self._registry:
            self.subscription_saved(subscription)
        self._subscriptions.listener = self

    # -- what this broker asks (the `SubscriptionListener` seam) -------------------

    def subscription_saved(self, subscription: Subscription) -> None:
        queue = subscription.queue
        source = ""
        pair: tuple[str, str] | None
        if queue.startswith(LINK_QUEUE_PREFIX):
            source = queue[len(LINK_QUEUE_PREFIX) :]
            pair = (subscription.sub_point, subscription.topic)
        elif subscription.has("Local"):
            pair = None
        else:
            try:
                pair = proxy_pair(subscription.sub_point, subscription.topic)
            except ValueError:
                pair = None
        self._send_changes(self.table.set(subscription.id, pair, source))

    def subscription_removed(self, subscription: Subscription) -> None:
        self._send_changes(self.table.set(subscription.id, None))

    def _send_changes(self, changes: list[Change]) -> None:
        for change in changes:
            self._send(
                change.neighbour,
                ProxyChange(change.op, 0, change.sub_point, change.topic_filter),
            )

    def send_sync(self, neighbour: str) -> None:
        """The whole set asked of `neighbour`, at every (re)connection of its link."""
        for part in sync_parts(0, self.table.wanted(neighbour)):
            self._send(neighbour, part)

    def asked_of(self, neighbour: str) -> int:
        return len(self.table.wanted(neighbour))

    def asked(self) -> list[tuple[str, str, str, int]]:
        """Every proxy this broker asks of its neighbours: (neighbour, sub point, filter,
        how many subscriptions it stands for), for ListSubs' `Direction: to`."""
        table = self.table
        return [
            (neighbour, *pair, table.count(neighbour, pair))
            for neighbour in table.neighbours
            for pair in table.wanted(neighbour)
        ]

    # -- what a neighbour asks ------------------------------------------------------

    def received(self, neighbour: str, message: Sync | ProxyChange) -> None:
        if isinstance(message, ProxyChange):
            if message.op == "add":
                self._add(neighbour, message.sub_point, message.topic_filter)
            else:
                self._remove(neighbour, message.sub_point, message.topic_filter)
            return
        parts = [] if message.part == 0 else self._incoming.get(neighbour, [])
        parts.extend(message.subs)
        self._incoming[neighbour] = parts
        if message.last:
            del self._incoming[neighbour]
            self._apply_sync(neighbour, parts)

    def _apply_sync(self, neighbour: str, pairs: list[tuple[str, str]]) -> None:
        wanted = set(pairs)
        for subscription in self._registry.of_queue(LINK_QUEUE_PREFIX + neighbour):
            pair = (subscription.sub_point, subscription.topic)
            if pair in wanted:
                wanted.discard(pair)
            else:
                self._subscriptions.remove(subscription)
                log.debug("link %r: proxy %r swept", neighbour, subscription.topic)
        for sub_point, topic_filter in sorted(wanted):
            self._add(neighbour, sub_point, topic_filter)

    def _add(self, neighbour: str, sub_point: str, topic_filter: str) -> None:
        if sub_point not in self._sub_points:
            log.warning("link %r: proxy for undeclared sub point %r ignored", neighbour, sub_point)
            return
        problem = self._topic_limits.filter_error(topic_filter)
        if problem is not None:
            log.warning("link %r: proxy for %r ignored: %s", neighbour, topic_filter, problem)
            return
        identity = Identity(self._own, LINK_QUEUE_PREFIX + neighbour)
        registry = self._registry
        if registry.get((identity, topic_filter, sub_point, "")) is not None:
            return
        subscription = Subscription(
            id=registry.new_id(),
            identity=identity,
            topic=topic_filter,
            sub_point=sub_point,
            owner=LINK_OWNER,
            qos=2,
            created_at=time.time(),
            mqtt=True,
            retain_as_published=True,
        )
        registry.add(subscription)
        self._subscriptions.saved(subscription)
        log.debug("link %r: proxy %r (sub point %r) added", neighbour, topic_filter, sub_point)
        if self._answer is not None:
            self._answer(neighbour, sub_point, topic_filter)

    def _remove(self, neighbour: str, sub_point: str, topic_filter: str) -> None:
        identity = Identity(self._own, LINK_QUEUE_PREFIX + neighbour)
        subscription = self._registry.get((identity, topic_filter, sub_point, ""))
        if subscription is not None:
            self._subscriptions.remove(subscription)
            log.debug(
                "link %r: proxy %r (sub point %r) removed", neighbour, topic_filter, sub_point
            )
