"""The subscription registry: every subscription, MQTT or MQ, and how to match them.

Theory of operation
-------------------
The registry indexes subscriptions (subscription.py) by key, id, SubName and queue, and
keeps one topic trie per subscription point. Matching a publication (topic, subscription
point) goes topic trie first (cheap, cached per topic), then the filter (expensive,
evaluated only for the subscriptions the trie selected, with the payload parsed once for all
of them). `Route` holds the cached, filter-free part already merged per queue, so the common
case (plain MQTT subscriptions) costs one dict lookup per message.

Filters have budgets, since their cost is chosen by whoever registers them: the size of
each filter and of each user's filters (`Filter.size`, checked by the command handlers with
`filter_size_of`), and the time one user's filters may spend on one publication
(`filter_time`), charged to the owner of the subscriptions (`Subscription.owner`: the user
who registered them; every anonymous client is the owner ""). Past it, that owner's
filtered subscriptions not yet evaluated do not get the publication, and are counted in
`filters_skipped`; the other owners' are evaluated as usual, so a subscription is never
skipped because of another user's filters. Each owner's first filter is evaluated whatever
it costs (a filter is never interrupted), so one publication spends at most the budget plus
one filter per owner with filtered subscriptions it matches. The bookkeeping per owner
exists only for the routes whose filtered subscriptions have more than one owner
(`Route.owners`).

Pure data and policy: no I/O; the only clock reads are those of the filter time budgets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Final, cast

from ..filters import FilterSet
from ..filters import Message as FilterMessage
from .options5 import DeliveryOptions, filter_properties, options5_of_queues
from .subscription import PERSISTENCE_RANK, Subscription, SubscriptionKey
from .topic_tree import DEFAULT_CACHE_BYTES, SubscriptionTree

FILTER_SET_MIN = 4  # filtered subscriptions on one topic from which a FilterSet pays off

log = logging.getLogger("telemq.subscriptions")


@dataclass(slots=True)
class Route:
    """The cached result of matching one topic at one subscription point.

    `plain` maps queue -> (highest QoS, highest persistence rank) over the
    subscriptions without a filter, already merged per queue; `filtered` lists
    subscriptions whose filter must be evaluated against each message. With many
    of them, `filter_set` holds their filters under their position in `filtered`,
    so that one message is matched against all of them through its indexes (each
    distinct filter and each field read once). PubOnReqOnly subscriptions are in
    neither: they receive nothing but what ReqUpdate sends.
    """

    plain: dict[str, tuple[int, int]]
    filtered: list[Subscription]
    filter_set: FilterSet[int] | None = None
    # MQTT 5.0: queue -> its options, for the queues with a subscription that has some.
    options5: dict[str, DeliveryOptions] | None = None
    # Shared subscriptions: `$share/{name}/{filter}` -> its members' subscriptions, one of
    # which gets each publication (the router picks it).
    shared: dict[str, list[Subscription]] | None = None
    # The same without the `Local` subscriptions (MQ RegOpt Local), for publications made
    # at other brokers of the network; None when no Local subscription matches.
    network: Route | None = None
    # Position in `filtered` -> the subscription's owner, when they have more than one
    # (`filtered` is then sorted by owner); None: one owner, one filter time budget.
    owners: dict[int, str] | None = None


# The route of every topic no subscription matches (read only, as every cached `Route`).
NO_MATCH: Final = Route({}, [])


class Registry:
    """Every subscription, indexed by key, id, name and queue (see module docstring)."""

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES, filter_time: float = 0.0) -> None:
        """`cache_bytes`: bound on the topic names each routing cache keeps (0: none).
        `filter_time`: seconds one publication may spend on content filters (0: no bound)."""
        self._cache_limit = cache_bytes
        self._routes_bytes = 0
        self._filter_time = filter_time
        self._filtered: dict[int, Subscription] = {}  # the subscriptions with a filter
        self.filters_skipped = 0  # filtered subscriptions not evaluated: past filter_time
        self._by_id: dict[int, Subscription] = {}
        self._by_key: dict[SubscriptionKey, Subscription] = {}
        self._by_name: dict[tuple[str, str], Subscription] = {}  # (sub point, SubName)
        self._by_queue: dict[str, dict[int, Subscription]] = {}
        self._trees: dict[str, SubscriptionTree] = {}
        self._routes: dict[tuple[str, str], Route] = {}
        self._next_id = 1
        self._with_options5: set[int] = set()  # ids of subscriptions with 5.0 options
        self._shared_count = 0  # shared subscriptions
        # Either of those exists (`extras` worth asking): a plain attribute, read per message.
        self.has_extras = False

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self._by_id.values()))

    def new_id(self) -> int:
        value = self._next_id
        self._next_id += 1
        return value

    def get(self, key: SubscriptionKey) -> Subscription | None:
        return self._by_key.get(key)

    def by_id(self, subscription_id: int) -> Subscription | None:
        return self._by_id.get(subscription_id)

    def by_name(self, sub_point: str, name: str) -> Subscription | None:
        return self._by_name.get((sub_point, name))

    def of_queue(self, queue: str) -> list[Subscription]:
        return list(self._by_queue.get(queue, {}).values())

    def count_of_queue(self, queue: str) -> int:
        return len(self._by_queue.get(queue, ()))

    def filter_size_of(self, owner: str) -> int:
        """The size (`Filter.size`) of the filters of the subscriptions `owner` owns."""
        return sum(
            s.compiled.size
            for s in self._filtered.values()
            if s.owner == owner and s.compiled is not None
        )

    @property
    def topic_filters(self) -> int:
        """Distinct topic filters subscribed to, over every subscription point."""
        return sum(tree.filters for tree in self._trees.values())

    def count_for(self, sub_point: str) -> int:
        tree = self._trees.get(sub_point)
        return tree.count if tree else 0

    def add(self, subscription: Subscription) -> None:
        """Insert a new subscription (its key must not be registered yet)."""
        if subscription.key in self._by_key:
            raise ValueError(f"subscription already registered: {subscription.key}")
        if subscription.id >= self._next_id:
            self._next_id = subscription.id + 1
        self._by_id[subscription.id] = subscription
        self._by_key[subscription.key] = subscription
        if subscription.name:
            self._by_name[(subscription.sub_point, subscription.name)] = subscription
        self._by_queue.setdefault(subscription.queue, {})[subscription.id] = subscription
        if subscription.compiled is not None:
            self._filtered[subscription.id] = subscription
        tree = self._trees.get(subscription.sub_point)
        if tree is None:
            # `walk`ed, never `match`ed: the routes are this registry's cache of its answers.
            tree = self._trees[subscription.sub_point] = SubscriptionTree()
        tree.add(subscription.match_topic, subscription.id, subscription.qos)
        if subscription.has_options5:
            self._with_options5.add(subscription.id)
        if subscription.share_name:
            self._shared_count += 1
        self._drop_routes()

    @property
    def has_shared(self) -> bool:
        """Is there a shared subscription?"""
        return self._shared_count > 0

    def extras(
        self, sub_point: str, topic: str
    ) -> tuple[dict[str, DeliveryOptions] | None, dict[str, list[Subscription]] | None]:
        """What a publication's route holds besides its targets (after `targets`, whose
        route this reads from the cache): the 5.0 options of its queues, and the shared
        groups it matches (`Route.options5`, `Route.shared`)."""
        route = self._routes.get((sub_point, topic))
        if route is None:
            route = self.route(sub_point, topic)
        if route is None:
            return None, None
        return route.options5, route.shared

    def members(self, sub_point: str, group: str) -> list[Subscription]:
        """The subscriptions of one shared subscription group (`$share/{name}/{filter}`)."""
        return [
            s
            for s in self._by_id.values()
            if s.share_name and s.topic == group and s.sub_point == sub_point
        ]

    def remove(self, subscription: Subscription) -> bool:
        if self._by_id.pop(subscription.id, None) is None:
            return False
        self._by_key.pop(subscription.key, None)
        self._filtered.pop(subscription.id, None)
        self._with_options5.discard(subscription.id)
        if subscription.share_name:
            self._shared_count -= 1
        if (
            subscription.name
            and self._by_name.get((subscription.sub_point, subscription.name)) is subscription
        ):
            del self._by_name[(subscription.sub_point, subscription.name)]
        queue = self._by_queue.get(subscription.queue)
        if queue is not None:
            queue.pop(subscription.id, None)
            if not queue:
                del self._by_queue[subscription.queue]
        tree = self._trees.get(subscription.sub_point)
        if tree is not None:
            tree.remove(subscription.match_topic, subscription.id)
        self._drop_routes()
        return True

    def changed(self, subscription: Subscription, old_name: str = "") -> None:
        """Re-index after attributes changed in place (name, QoS, options, filter)."""
        if old_name and self._by_name.get((subscription.sub_point, old_name)) is subscription:
            del self._by_name[(subscription.sub_point, old_name)]
        if subscription.name:
            self._by_name[(subscription.sub_point, subscription.name)] = subscription
        tree = self._trees.get(subscription.sub_point)
        if tree is not None:
            tree.add(subscription.match_topic, subscription.id, subscription.qos)
        if subscription.has_options5:
            self._with_options5.add(subscription.id)
        else:
            self._with_options5.discard(subscription.id)
        self._drop_routes()

    def _drop_routes(self) -> None:
        self._routes.clear()
        self._routes_bytes = 0
        self.has_extras = bool(self._with_options5) or self._shared_count > 0

    def route(self, sub_point: str, topic: str) -> Route | None:
        """Subscriptions matching `topic` at `sub_point` (cached; see `Route`)."""
        cache_key = (sub_point, topic)
        route = self._routes.get(cache_key)
        if route is not None:
            return route
        tree = self._trees.get(sub_point)
        if tree is None:
            return None
        by_id = self._by_id
        matching: list[Subscription] = []
        local = False
        for subscription_id in tree.walk(topic):  # the route is the cache
            subscription = by_id.get(cast(int, subscription_id))
            if subscription is None or "PubOnReqOnly" in subscription.options:
                continue
            matching.append(subscription)
            if "Local" in subscription.options:
                local = True
        if not matching:
            route = NO_MATCH  # a topic nobody subscribes to: no Route of its own
        else:
            route = self._build_route(matching)
            if local:  # publications from other brokers skip the Local subscriptions
                route.network = self._build_route([s for s in matching if "Local" not in s.options])
        size = self._routes_bytes + len(topic)
        limit = self._cache_limit
        if len(self._routes) > 16384 or (limit and size > limit):
            self._routes.clear()
            size = len(topic)
        self._routes_bytes = size
        self._routes[cache_key] = route
        return route

    def _build_route(self, matching: list[Subscription]) -> Route:
        plain: dict[str, tuple[int, int]] = {}
        filtered: list[Subscription] = []
        with_options5: list[Subscription] = []
        shared: dict[str, list[Subscription]] | None = None
        for subscription in matching:
            if subscription.share_name:
                if shared is None:
                    shared = {}
                shared.setdefault(subscription.topic, []).append(subscription)
            elif subscription.compiled is not None:
                filtered.append(subscription)
                if self._with_options5 and subscription.has_options5:
                    # Its options go with the copy whenever its queue gets one (a CorrelId).
                    with_options5.append(subscription)
            else:
                if self._with_options5:
                    with_options5.append(subscription)
                rank = PERSISTENCE_RANK[subscription.persistence]
                current = plain.get(subscription.queue)
                if current is None:
                    plain[subscription.queue] = (subscription.qos, rank)
                else:
                    plain[subscription.queue] = (
                        max(current[0], subscription.qos),
                        max(current[1], rank),
                    )
        owners: dict[int, str] | None = None
        if filtered and any(s.owner != filtered[0].owner for s in filtered):
            # Each owner's run of subscriptions together, for the plain list's budgets.
            filtered.sort(key=_owner_of)
            owners = {position: s.owner for position, s in enumerate(filtered)}
        filter_set: FilterSet[int] | None = None
        if len(filtered) >= FILTER_SET_MIN:
            filter_set = FilterSet()
            for position, subscription in enumerate(filtered):
                assert subscription.compiled is not None
                filter_set.add(position, subscription.compiled)
        route = Route(plain, filtered, filter_set, options5_of_queues(with_options5), shared)
        route.owners = owners
        return route

    @property
    def cache_bytes(self) -> int:
        """Characters of the topic names the routing cache (the routes) holds now."""
        return self._routes_bytes

    def targets(
        self,
        sub_point: str,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        client_id: str,
        user_id: str,
        properties: bytes = b"",
        from_network: bool = False,
        broker: str = "",
    ) -> dict[str, tuple[int, int]] | None:
        """The queues one publication goes to: queue -> (highest granted QoS, highest
        persistence rank), content filters evaluated (the payload parsed once for all).
        `properties`: the publication's MQTT 5.0 properties, as `Message.properties`;
        `from_network`: it was made at another broker (`Local` subscriptions do not get it);
        `broker`: the broker it was made at (`Properties.Broker`).

        Without filtered subscriptions this is the cached `Route.plain`: read it, never
        change it.
        """
        route = self.route(sub_point, topic)
        if route is None:
            return None
        if from_network and route.network is not None:
            route = route.network
        if not route.filtered:
            return route.plain
        targets = dict(route.plain)
        seen: dict[str, object] = {  # already what filters see: str, bool and float values
            "Topic": topic,
            "QoS": float(qos),
            "Retain": bool(retain),
            "ClientId": client_id,
            "UserId": user_id,
            "SubPoint": sub_point,
            "Broker": broker,
        }
        if properties:
            seen.update(filter_properties(properties))
        view = FilterMessage.prepared(payload, seen)
        filtered = route.filtered
        budget = self._filter_time
        filter_set = route.filter_set
        if filter_set is not None:
            owners = route.owners
            if owners is None or not budget:  # one owner: one deadline, as one budget
                deadline = perf_counter() + budget if budget else 0.0
                matched, skipped = filter_set.matching_within(view, deadline)
                if skipped:
                    self._skipped(topic, skipped, filtered[0].owner)
            else:
                matched, skipped_of = filter_set.matching_charged(view, budget, owners)
                for owner, count in skipped_of.items():
                    self._skipped(topic, count, owner)
            for position in matched:
                _merge_target(targets, filtered[position], qos)
            return targets
        # A few subscriptions, each owner's together: a deadline per owner's run.
        owner = ""
        deadline = 0.0
        skipped = 0
        for subscription in filtered:
            if budget:
                if not deadline or subscription.owner != owner:
                    if skipped:
                        self._skipped(topic, skipped, owner)
                        skipped = 0
                    owner = subscription.owner
                    deadline = perf_counter() + budget  # its first is always evaluated
                elif skipped or perf_counter() > deadline:
                    skipped += 1
                    continue
            compiled = subscription.compiled
            if compiled is not None and compiled.evaluate_message(view) is True:
                _merge_target(targets, subscription, qos)
        if skipped:
            self._skipped(topic, skipped, owner)
        return targets

    def _skipped(self, topic: str, count: int, owner: str) -> None:
        """Count `owner`'s skipped subscriptions; log the first skip, then every 1,000."""
        before = self.filters_skipped
        self.filters_skipped += count
        if before == 0 or before // 1000 != self.filters_skipped // 1000:
            log.warning(
                "publication on %.100r: %d filtered subscriptions of %s not evaluated, past "
                "the filter time budget of %.3g ms per user (limits.max_filter_time; %d "
                "skipped so far)",
                topic,
                count,
                f"user {owner!r}" if owner else "anonymous clients",
                self._filter_time * 1000,
                self.filters_skipped,
            )

    def expired(self, now: float) -> list[Subscription]:
        return [s for s in self._by_id.values() if s.expiry_at is not None and s.expiry_at <= now]

    def remove_queue(self, queue: str) -> list[Subscription]:
        """Remove every subscription delivering to `queue`; returns them."""
        removed = self.of_queue(queue)
        for subscription in removed:
            self.remove(subscription)
        return removed

    def load(self, subscriptions: Iterable[Subscription]) -> None:
        for subscription in subscriptions:
            self.add(subscription)


def _owner_of(subscription: Subscription) -> str:
    """The sort key of `Route.filtered` when it has several owners."""
    return subscription.owner


def _merge_target(
    targets: dict[str, tuple[int, int]], subscription: Subscription, msg_qos: int
) -> None:
    """One copy per queue: the highest QoS and the most durable persistence win."""
    qos = subscription.qos if subscription.qos < msg_qos else msg_qos
    rank = PERSISTENCE_RANK[subscription.persistence]
    queue = subscription.queue
    current = targets.get(queue)
    if current is None:
        targets[queue] = (qos, rank)
    else:
        targets[queue] = (max(current[0], qos), max(current[1], rank))
