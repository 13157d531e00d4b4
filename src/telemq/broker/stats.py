"""Statistics and `$SYS`: the counters every room increments, and what they publish.

Theory of operation
-------------------
`BrokerStats` is a bag of counters; each room increments its own, on the event loop, so they
need no lock. `SysReporter` reads the counters and the rooms' sizes every `sys.interval`
seconds and publishes them as retained QoS 0 messages under `$SYS/broker/` (the topics of
README.md), the way Mosquitto does. It only reads: nothing in the broker depends on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from .. import __version__
from ..store import Store, StoreStats

if TYPE_CHECKING:
    from ..subscriptions import Registry
    from .client import Client
    from .config import BrokerConfig
    from .retained import RetainedMessages
    from .router import Router
    from .sessions import Sessions

log = logging.getLogger("telemq.broker")

SYS_PREFIX = "$SYS/broker/"


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
        self.bytes_received_closed = 0  # bytes of connections that have ended
        self.bytes_sent_closed = 0

    @property
    def messages_received(self) -> int:
        return sum(self.received_by_qos)

    @property
    def messages_sent(self) -> int:
        return sum(self.sent_by_qos)

    def connection_ended(self, client: Client) -> None:
        if client.connection is not None:
            self.bytes_received_closed += client.connection.bytes_received
            self.bytes_sent_closed += client.connection.bytes_sent


class SysReporter:
    """Publishes `$SYS/broker/...` (see module docstring)."""

    def __init__(
        self,
        config: BrokerConfig,
        stats: BrokerStats,
        sessions: Sessions,
        registry: Registry,
        retained: RetainedMessages,
        router: Router,
        store: Store,
        executor: Executor | None,
        quarantined: Callable[[], int],
    ) -> None:
        self._config = config
        self._stats = stats
        self._sessions = sessions
        self._registry = registry
        self._retained = retained
        self._router = router
        self._store = store
        self._executor = executor
        self._quarantined = quarantined
        self.store_stats = StoreStats()
        self.started_at = time.monotonic()
        # More `$SYS/broker/` values (links.py): key under the prefix -> value.
        self.sources: list[Callable[[], dict[str, str]]] = []

    async def run(self) -> None:
        interval = self._config.sys.interval
        while True:
            try:
                await self.publish()
            except Exception:
                log.exception("$SYS update failed")
            await asyncio.sleep(interval)

    async def publish(self) -> None:
        if self._executor is not None:
            loop = asyncio.get_running_loop()
            self.store_stats = await loop.run_in_executor(self._executor, self._store.stats)
        else:
            self.store_stats = self._store.stats()
        for topic, value in self.values().items():
            self._router.publish(topic, value.encode("utf-8"), 0, True)

    def bytes_moved(self) -> tuple[int, int]:
        """Bytes received from and sent to clients since start, connected ones included."""
        stats = self._stats
        clients: Iterable[Client] = self._sessions.clients
        bytes_received = stats.bytes_received_closed + sum(
            c.connection.bytes_received for c in clients if c.connection is not None
        )
        bytes_sent = stats.bytes_sent_closed + sum(
            c.connection.bytes_sent for c in clients if c.connection is not None
        )
        return bytes_received, bytes_sent

    def values(self) -> dict[str, str]:
        stats = self._stats
        sessions = self._sessions
        bytes_received, bytes_sent = self.bytes_moved()
        store_stats = self.store_stats
        values = {
            "version": f"telemq {__version__}",
            "uptime": f"{int(time.monotonic() - self.started_at)} seconds",
            "clients/connected": str(sessions.connected),
            "clients/total": str(len(sessions.by_id)),
            "clients/maximum": str(self._config.limits.max_connections),
            "messages/received": str(stats.messages_received),
            "messages/sent": str(stats.messages_sent),
            "messages/dropped": str(stats.messages_dropped),
            "messages/dropped/too large": str(stats.messages_too_large),
            "messages/dropped/expired": str(stats.messages_expired),
            "publish/messages/received": str(stats.publish_received),
            "publish/messages/denied": str(stats.publish_denied),
            "commands/received": str(stats.commands),
            "bytes/received": str(bytes_received),
            "bytes/sent": str(bytes_sent),
            "subscriptions/count": str(len(self._registry)),
            "subscriptions/refused": str(stats.subscriptions_refused),
            "filters/skipped": str(self._registry.filters_skipped),
            "retained messages/count": str(self._retained.count()),
            "retained messages/bytes": str(self._retained.bytes),
            "retained messages/refused": str(stats.retained_refused),
            "topic cache/bytes": str(self._registry.cache_bytes + self._router.cache_bytes),
            "store/bytes": str(store_stats.bytes_on_disk),
            "store/quarantined": str(max(self._quarantined(), store_stats.quarantined)),
            "journal/rows": str(store_stats.journal_rows),
            "journal/last_seq": str(self._router.next_seq - 1),
            "journal/trimmed": str(stats.journal_trimmed),
        }
        for source in self.sources:
            values.update(source())
        return {SYS_PREFIX + key: value for key, value in values.items()}
