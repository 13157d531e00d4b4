"""A subscription, MQTT or MQ: its identity, key, options and stored form.

Theory of operation
-------------------
One model serves both front doors (design §5): an MQTT SUBSCRIBE is a registration for the
client's own queue with default options, and an MQ RegSub command is a registration with
whatever options it names. A subscription is identified by its key (identity, topic,
subscription point, filter); the identity is (queue manager, queue, CorrelId) and is owned
by a user id. Its deliveries go to a queue, a session of this broker: the identity's own, or
for a queue at another broker of the network the session that holds them on their way
(`Identity.delivery_queue`). The network's own sessions are named by prefixes that no
client id or MQ queue may take (`RESERVED_QUEUE_PREFIXES`).

`Subscription.to_data` and `from_data` are its stored form (the store keeps it as JSON);
the registry (registry.py) indexes subscriptions and matches publications against them.
Pure data: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..filters import Filter, FilterError, compile_filter
from ..protocol.properties import MAX_SUBSCRIPTION_ID
from ..protocol.topics import SHARE_PREFIX, shared_subscription
from .options5 import correlation_id


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
    """One registration: where its deliveries go (`identity`), what it matches (`topic` at
    `sub_point`, then `compiled`, its filter), at which QoS and how durably."""

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
            # The key holds the canonical text: a record written when the text printed
            # otherwise (e.g. Root.MQMD.UserIdentifier, now Properties.UserId) is still
            # found by a command that names its filter today.
            subscription.filter_text = subscription.compiled.text
        return subscription
