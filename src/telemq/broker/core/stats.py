"""Statistics: the counters every room increments.

Theory of operation
-------------------
`BrokerStats` is a bag of counters; each room increments its own, on the event loop, so they
need no lock; a session's own few (`SessionCounts`) are made at its first count.
`Histogram` counts the store's commit times and batch sizes, once per commit. What reads
them lives outside the core: `$SYS` (operations/sys.py) and `/metrics`
(operations/metrics.py). Nothing in the core depends on what they publish.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass


class SessionCounts:
    """What a session counts that most never do (`Session.dropped`, `.forwarded`): made at
    the first count, so an idle session carries one reference, not two counters."""

    __slots__ = ("dropped", "forwarded")

    def __init__(self) -> None:
        self.dropped = 0
        self.forwarded = 0


class Histogram:
    """Observations counted in buckets, the way Prometheus histograms count them: the store's
    commit and sync times and group-commit batch sizes (one observation per commit, never
    per message). `counts[i]` holds the observations at most `bounds[i]` and above the
    bound before; the last holds those above every bound."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0  # the sum of the observations

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


# Seconds (commit, sync) and write operations (batch sizes): what a disk and a load span.
SECONDS_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0)


class BrokerStats:
    """Counters published under $SYS."""

    __slots__ = (
        "authentication_failures",
        "bytes_received_closed",
        "bytes_sent_closed",
        "clients_total_ever",
        "commands",
        "journal_trimmed",
        "messages_acked",
        "messages_dropped",
        "messages_expired",
        "messages_too_large",
        "publish_denied",
        "publish_received",
        "publish_sent",
        "received_by_qos",
        "retained_refused",
        "sent_by_qos",
        "sparkplug_invalid",
        "subscribe_denied",
        "subscriptions_refused",
    )

    def __init__(self) -> None:
        self.received_by_qos = [0, 0, 0]  # publications accepted from clients, by QoS
        self.sent_by_qos = [0, 0, 0]  # PUBLISH packets sent to clients (and delivery targets)
        self.messages_acked = 0  # PUBACK and PUBCOMP from subscribers
        self.messages_dropped = 0  # deliveries dropped (queue full, slow consumer, ...)
        self.messages_too_large = 0  # of those: above an MQTT 5.0 client's maximum packet size
        self.messages_expired = 0  # of those: MQTT 5.0 message expiry passed while queued
        self.publish_received = 0
        self.publish_sent = 0
        self.clients_total_ever = 0
        self.publish_denied = 0  # PUBLISH packets dropped by the ACL
        self.subscribe_denied = 0  # subscriptions refused by the ACL
        self.authentication_failures = 0  # connections refused for who they are
        self.commands = 0  # MQ command messages executed
        self.journal_trimmed = 0  # journal rows deleted by retention
        self.subscriptions_refused = 0  # beyond limits.max_subscriptions_per_client
        self.retained_refused = 0  # not retained: beyond the retained quotas
        self.sparkplug_invalid = 0  # under spBv1.0/ but not Sparkplug B (core/sparkplug.py)
        self.bytes_received_closed = 0  # bytes of connections that have ended
        self.bytes_sent_closed = 0

    @property
    def messages_received(self) -> int:
        return sum(self.received_by_qos)

    @property
    def messages_sent(self) -> int:
        return sum(self.sent_by_qos)

    def connection_ended(self, bytes_received: int, bytes_sent: int) -> None:
        """What an ended connection moved (counted by connections still open until then)."""
        self.bytes_received_closed += bytes_received
        self.bytes_sent_closed += bytes_sent


@dataclass(slots=True)
class PeerCounters:
    """One link's or bridge's state and traffic, as its room counts them (for `/metrics`
    and the operators' views; `$SYS` has them through the rooms' `sys_values`)."""

    name: str
    state: str  # "connected", "down", "refused: ..."
    received: int  # publications that came over it
    sent: int | None  # publications sent over it (None: not counted, as for a bridge)
    dropped: int  # a link: copies dropped (queue full); a bridge: arrivals no rule maps
    queued: int  # publications waiting for it
