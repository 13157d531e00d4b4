"""The subscription registry: every subscription, MQTT or MQ, and how to match them.

Theory of operation
-------------------
One model serves both front doors (design §5): an MQTT SUBSCRIBE is a
registration for the client's own queue with default options, and an MQ RegSub
command is a registration with whatever options it names. A subscription is
identified by its key (identity, topic, subscription point, filter); the
identity is (queue manager, queue, CorrelId) and is owned by a user id.

Matching a publication (topic, subscription point) goes topic trie first
(cheap, cached per topic), then the filter (expensive, evaluated only for the
subscriptions the trie selected, with the payload parsed once for all of
them). `Route` holds the cached, filter-free part already merged per queue, so
the common case (plain MQTT subscriptions) costs one dict lookup per message.

Filters have budgets, since their cost is chosen by whoever registers them: the size of
each filter and of each user's filters (`Filter.size`, checked by the command handlers with
`filter_size_of`), and the time one publication may spend evaluating them (`filter_time`):
past it, the filtered subscriptions not yet evaluated do not get the publication, and are
counted in `filters_skipped`. That bound keeps one publication from holding the broker.

Pure data and policy: no I/O; the only clock read is the evaluation deadline.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, cast

from ..filters import Filter, FilterError, FilterSet, compile_filter
from ..filters import Message as FilterMessage
from ..protocol.properties import MAX_SUBSCRIPTION_ID
from ..protocol.topics import SHARE_PREFIX, shared_subscription
from .options5 import DeliveryOptions, correlation_id, filter_properties, options5_of_queues
from .topic_tree import DEFAULT_CACHE_BYTES, SubscriptionTree

FILTER_SET_MIN = 4  # filtered subscriptions on one topic from which a FilterSet pays off

log = logging.getLogger("telemq.subscriptions")


class Persistence(enum.StrEnum):
    """How deliveries of a subscription are kept (design §5)."""

    PERS_AS_PUB = "PersAsPub"  # durable iff the delivered QoS >= 1 (the MQTT rule)
    PERS = "Pers"  # durable, delivered at QoS >= 1
    NON_PERS = "NonPers"  # memory only
    PERS_AS_QUEUE = "PersAsQueue"  # the queue's default: durable sessions -> Pers


# How durable each persistence option is: with several subscriptions of one queue
# matching, the most durable wins.
PERSISTENCE_RANK: dict[Persistence, int] = {
    Persistence.NON_PERS: 0,
    Persistence.PERS_AS_PUB: 1,
    Persistence.PERS_AS_QUEUE: 2,
    Persistence.PERS: 3,
}

# Options kept on a subscription (the others act on the command only).
STORED_OPTIONS = frozenset(
    {
        "CorrelAsId",
        "DupsOK",
        "InformIfRet",
        "Local",
        "NewPubsOnly",
        "PubOnReqOnly",
        "VariableUserId",
    }
)


@dataclass(frozen=True, slots=True)
class Identity:
    """The traditional MQ subscriber identity: where deliveries go. `remote`: `qmgr` is
    another broker of the network (docs/network.md §7), so the deliveries wait here in the
    session `$remote/<qmgr>/<queue>` (`delivery_queue`) on their way to it. It follows from
    `qmgr` and this broker's name, so it takes no part in comparisons."""

    qmgr: str
    queue: str  # the queue (a session's client id) at broker `qmgr`
    correl_id: str = ""  # hex; only with CorrelAsId
    remote: bool = field(default=False, compare=False)

    @property
    def delivery_queue(self) -> str:
        """The session of this broker that the subscription's deliveries go to."""
        if self.remote:
            return f"{REMOTE_QUEUE_PREFIX}{self.qmgr}/{self.queue}"
        return self.queue


SubscriptionKey = tuple[Identity, str, str, str]  # identity, topic, sub point, filter text
# The queues of links to neighbour brokers (`$link/<neighbour>`): their subscriptions are the
# proxy subscriptions the neighbour asked for (docs/network.md).
LINK_QUEUE_PREFIX = "$link/"
# The sessions holding deliveries for queues on other brokers (`$remote/<broker>/<queue>`).
REMOTE_QUEUE_PREFIX = "$remote/"
# The local sessions of bridges to other MQTT brokers (`$bridge/<name>`).
BRIDGE_QUEUE_PREFIX = "$bridge/"
# Sessions only the network makes: no client id, MQ queue or remote queue may name one.
RESERVED_QUEUE_PREFIXES = (LINK_QUEUE_PREFIX, BRIDGE_QUEUE_PREFIX, REMOTE_QUEUE_PREFIX)


@dataclass(slots=True)
class Subscription:
    id: int
    identity: Identity
    topic: str
    sub_point: str = ""
    filter_text: str = ""
    owner: str = ""  # user id that registered the identity
    qos: int = 2  # highest QoS delivered
    name: str = ""  # SubName
    user_data: str = ""  # SubUserData
    options: frozenset[str] = frozenset()
    persistence: Persistence = Persistence.PERS_AS_PUB
    members: dict[str, bool] = field(default_factory=dict)  # SubIdentity -> exclusive
    expiry_at: float | None = None  # UTC seconds; None = never
    created_at: float = 0.0
    mqtt: bool = False  # created by an MQTT SUBSCRIBE
    compiled: Filter | None = None
    # MQTT 5.0 subscription options (§3.8.3.1) and Subscription Identifier (0: none).
    no_local: bool = False
    retain_as_published: bool = False
    subscription_id: int = 0
    # A shared subscription (`$share/{share_name}/{filter}`, MQTT 5.0 §4.8.2): `topic` is
    # the whole `$share/...` string, `match_topic` the filter it matches with.
    share_name: str = ""

    @property
    def match_topic(self) -> str:
        if not self.share_name:
            return self.topic
        return self.topic[len(SHARE_PREFIX) + len(self.share_name) + 1 :]

    @property
    def has_options5(self) -> bool:
        """Does delivering to it need more than the QoS (`DeliveryOptions`): MQTT 5.0
        options, or a CorrelId to carry (MQ CorrelAsId)?"""
        return (
            self.no_local
            or self.retain_as_published
            or self.subscription_id != 0
            or correlation_id(self) != ""
        )

    @property
    def key(self) -> SubscriptionKey:
        return (self.identity, self.topic, self.sub_point, self.filter_text)

    @property
    def queue(self) -> str:
        """The session its deliveries go to (`Identity.delivery_queue`)."""
        return self.identity.delivery_queue

    @property
    def proxy_for(self) -> str:
        """The neighbour broker this is a proxy subscription of; "" for a subscriber's."""
        queue = self.identity.queue
        return queue[len(LINK_QUEUE_PREFIX) :] if queue.startswith(LINK_QUEUE_PREFIX) else ""

    def has(self, option: str) -> bool:
        return option in self.options

    def admits(self, payload: bytes, properties: dict[str, object]) -> bool:
        """Does the content filter (if any) select this message? `properties`: the
        message's Topic, QoS, Retain, ClientId, UserId, SubPoint and Broker."""
        compiled = self.compiled
        return compiled is None or compiled.evaluate(payload, properties) is True

    def locked_by(self) -> str | None:
        for member, exclusive in self.members.items():
            if exclusive:
                return member
        return None

    def to_data(self) -> dict[str, Any]:
        """JSON-able attributes for the store (the filter is kept as text)."""
        return {
            "id": self.id,
            "qmgr": self.identity.qmgr,
            "queue": self.identity.queue,
            "correl_id": self.identity.correl_id,
            "topic": self.topic,
            "sub_point": self.sub_point,
            "filter": self.filter_text,
            "owner": self.owner,
            "qos": self.qos,
            "name": self.name,
            "user_data": self.user_data,
            "options": sorted(self.options),
            "persistence": self.persistence.value,
            "members": self.members,
            "expiry_at": self.expiry_at,
            "created_at": self.created_at,
            "mqtt": self.mqtt,
            **self._options5_data(),
            **({"remote": True} if self.identity.remote else {}),
        }

    def _options5_data(self) -> dict[str, Any]:
        """The 5.0 options, when set (records of other subscriptions stay as they were)."""
        data: dict[str, Any] = {}
        if self.no_local:
            data["no_local"] = True
        if self.retain_as_published:
            data["retain_as_published"] = True
        if self.subscription_id:
            data["subscription_id"] = self.subscription_id
        if self.share_name:
            data["shared"] = True
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Subscription:
        """Rebuild from `to_data`; raises ValueError, KeyError or TypeError on bad data (a
        filter that does not compile is a ValueError)."""
        filter_text = str(data.get("filter", ""))
        subscription = cls(
            id=int(data["id"]),
            identity=Identity(
                str(data.get("qmgr", "")),
                str(data["queue"]),
                str(data.get("correl_id", "")),
                bool(data.get("remote", False)),
            ),
            topic=str(data["topic"]),
            sub_point=str(data.get("sub_point", "")),
            filter_text=filter_text,
            owner=str(data.get("owner", "")),
            qos=int(data.get("qos", 2)),
            name=str(data.get("name", "")),
            user_data=str(data.get("user_data", "")),
            options=frozenset(str(o) for o in data.get("options", ())),
            persistence=Persistence(data.get("persistence", "PersAsPub")),
            members={str(k): bool(v) for k, v in dict(data.get("members", {})).items()},
            expiry_at=None if data.get("expiry_at") is None else float(data["expiry_at"]),
            created_at=float(data.get("created_at", 0.0)),
            mqtt=bool(data.get("mqtt", False)),
            no_local=bool(data.get("no_local", False)),
            retain_as_published=bool(data.get("retain_as_published", False)),
            subscription_id=int(data.get("subscription_id", 0)),
        )
        if subscription.qos not in (0, 1, 2):
            raise ValueError(f"qos {subscription.qos} out of range")
        if not 0 <= subscription.subscription_id <= MAX_SUBSCRIPTION_ID:
            raise ValueError(f"subscription id {subscription.subscription_id} out of range")
        if data.get("shared"):
            shared = shared_subscription(subscription.topic)
            if shared is None:
                raise ValueError(f"shared subscription {subscription.topic!r} without $share/")
            subscription.share_name = shared[0]
        if filter_text:
            try:
                subscription.compiled = compile_filter(filter_text)
            except FilterError as error:
                raise ValueError(f"filter {filter_text!r}: {error}") from None
        return subscription


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
            tree = self._trees[subscription.sub_point] = SubscriptionTree(self._cache_limit)
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
        for subscription_id in tree.match(topic):
            subscription = by_id.get(cast(int, subscription_id))
            if subscription is None or "PubOnReqOnly" in subscription.options:
                continue
            matching.append(subscription)
            if "Local" in subscription.options:
                local = True
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
        filter_set: FilterSet[int] | None = None
        if len(filtered) >= FILTER_SET_MIN:
            filter_set = FilterSet()
            for position, subscription in enumerate(filtered):
                assert subscription.compiled is not None
                filter_set.add(position, subscription.compiled)
        return Route(plain, filtered, filter_set, options5_of_queues(with_options5), shared)

    @property
    def cache_bytes(self) -> int:
        """Characters of the topic names the routing caches hold now."""
        return self._routes_bytes + sum(tree.cache_bytes for tree in self._trees.values())

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
        deadline = perf_counter() + self._filter_time if self._filter_time else 0.0
        skipped = 0
        if route.filter_set is not None:
            matched, skipped = route.filter_set.matching_within(view, deadline)
            for position in matched:
                _merge_target(targets, filtered[position], qos)
        else:
            for position, subscription in enumerate(filtered):
                if deadline and perf_counter() > deadline:
                    skipped = len(filtered) - position
                    break
                compiled = subscription.compiled
                if compiled is not None and compiled.evaluate_message(view) is True:
                    _merge_target(targets, subscription, qos)
        if skipped:
            self._skipped(topic, skipped)
        return targets

    def _skipped(self, topic: str, count: int) -> None:
        before = self.filters_skipped
        self.filters_skipped += count
        if before == 0 or before // 1000 != self.filters_skipped // 1000:
            log.warning(
                "publication on %.100r: %d filtered subscriptions not evaluated, past the "
                "filter time budget of %.1f ms (limits.max_filter_time; %d skipped so far)",
                topic,
                count,
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
