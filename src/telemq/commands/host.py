"""What the command handlers ask of the broker: `Host`, and who sent a command.

Theory of operation
-------------------
The handlers hold no I/O and no broker state but the subscription `Registry`: whatever else
a command needs (authorization, sessions and their queues, retained messages, publishing,
the network's brokers) they ask of a `Host`, which the broker implements (and the tests fake).
`Requester` says who sent a command, on which listener and at which QoS, and `PutResult`
what became of a Put.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from ..protocol.topics import TopicLimits
from ..subscriptions import Subscription


@dataclass(slots=True)
class Requester:
    """Who sent the command, and how."""

    client_id: str
    user_id: str
    sub_point: str  # the default subscription point (the listener's)
    qos: int = 0  # QoS of the command message (Publish and Put deliver at it)


class PutResult(enum.Enum):
    """What became of a message put on one queue (`Host.put_to_queue`)."""

    PUT = "put"  # sent, or waiting in the queue
    NO_QUEUE = "no queue"  # no session has that name
    NOT_CONNECTED = "not connected"  # QoS 0 is not queued for an offline session
    FULL = "full"  # the queue holds its maximum of messages


class Host(Protocol):
    """What the handlers need from the broker."""

    qmgr_name: str
    topic_limits: TopicLimits  # the broker's bounds on topics (3072 beyond them)
    max_filter_size: int  # `Filter.size` of one filter (3150 beyond; 0: no bound)
    max_filter_size_per_user: int  # of all of one user's filters (3150; 0: no bound)

    def now(self) -> float: ...

    def broker_known(self, name: str) -> bool:
        """Is `name` another broker of this broker's network (a `QMgrName` it can reach)?"""
        ...

    def proxies_asked(self) -> list[tuple[str, str, str, int]]:
        """The proxies this broker asks of its neighbours: (neighbour, sub point, filter,
        subscriptions it stands for)."""
        ...

    def sub_point_declared(self, name: str) -> bool: ...

    def may_subscribe(self, requester: Requester, topic_filter: str) -> bool: ...

    def may_publish(self, requester: Requester, topic: str) -> bool: ...

    def ensure_queue(self, queue: str, owner: str) -> None: ...

    def queue_owner(self, queue: str) -> str | None: ...

    def may_use_queue(self, requester: Requester, queue: str) -> bool: ...

    def is_admin(self, requester: Requester) -> bool: ...

    def reserve_subscriptions(self, queue: str, count: int) -> str | None:
        """None when `queue` may gain `count` subscriptions; else why not (the broker
        counts the refusal)."""
        ...

    def subscription_changed(self, subscription: Subscription) -> None: ...

    def subscription_removed(self, subscription: Subscription) -> None: ...

    def send_retained(self, subscription: Subscription) -> int: ...

    def publish(
        self,
        requester: Requester,
        topic: str,
        body: bytes,
        retain: bool,
        exclude_queue: str | None,
        expiry: float | None = None,
        local: bool = False,
    ) -> None:
        """`local`: PubOpt Local, for this broker's subscribers only (not the network's)."""

    def retained_topics(self, sub_point: str, topic_filter: str) -> list[str]: ...

    def delete_retained(self, sub_point: str, topic: str, local: bool = False) -> bool:
        """`local`: DelOpt Local, at this broker only (not the network's)."""

    def put_to_queue(
        self, requester: Requester, queue: str, topic: str, body: bytes, qos: int
    ) -> PutResult: ...
