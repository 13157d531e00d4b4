"""`$SYS`: the broker's counters and sizes, published as retained messages.

Theory of operation
-------------------
`SysReporter` reads the counters (`BrokerStats`) and the rooms' sizes every `sys.interval`
seconds and publishes them as retained QoS 0 messages under `$SYS/broker/` (the topics of
README.md), the way Mosquitto does. It only reads: nothing in the broker depends on it. The
peers add their own values through `sources` (the wiring appends the links' and bridges').
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from ... import __version__
from ...store import Store, StoreStats

if TYPE_CHECKING:
    from ...subscriptions import Registry
    from ..core.retained import RetainedMessages
    from ..core.router import Router
    from ..core.session import Client
    from ..core.sessions import Sessions
    from ..core.stats import BrokerStats
    from ..settings.config import BrokerConfig

log = logging.getLogger("telemq.broker")

SYS_PREFIX = "$SYS/broker/"


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
