"""One view of a running broker for its operators: `$SYS`, `/metrics` and `/api/v1`.

Theory of operation
-------------------
The rooms count (`BrokerStats`, the committer's counters, the registry's, the links' and
bridges' `PeerCounters`); `BrokerView.overview` reads them all at once, on the event loop
where they change, into one `Overview`. `FIGURES` says how each figure is shown: its
`$SYS/broker/` topic, its Prometheus family (with labels) and help, whether the admin API's
overview has it. `$SYS` (sys.py), `/metrics` (metrics.py) and `/api/v1/overview`
(admin_api.py) render that one snapshot through the table, so adding a counter touches the
room that counts, `overview` and one row of `FIGURES`, nothing else.

What is not a figure stays with its renderer: the store's histograms and the queue depths
(a walk over the sessions) are `/metrics`' own, the listings of clients and sessions the
admin API's, each reading the rooms through `rooms`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol

from ... import __version__
from ...store import Store, StoreStats
from ..core.rooms import CoreRooms
from ..core.stats import PeerCounters
from .leadership import ACTIVE, Leadership

GAUGE = "gauge"
COUNTER = "counter"


@dataclass(frozen=True, slots=True)
class Figure:
    """How one figure of the `Overview` is shown (see the module docstring)."""

    key: str  # its name in `Overview.values`, and in /api/v1/overview
    help: str  # the Prometheus family's help (the first figure of a family gives it)
    kind: str = GAUGE
    sys: str = ""  # its topic under $SYS/broker/ ("": not in $SYS)
    metric: str = ""  # its family under telemq_ ("": not in /metrics)
    labels: tuple[tuple[str, str], ...] = ()  # its sample's labels in that family
    api: bool = False  # in /api/v1/overview


_RECEIVED = "Publications accepted from clients, MQ Publish commands and links"
_SENT = "PUBLISH packets sent to subscribers"
_DROPPED = (
    "Deliveries dropped: expired (5.0), too large for the client (5.0), or other"
    " (a full queue, a client not reading, a refused queue)"
)
_DENIED = "Publications and subscriptions the ACL refused"

FIGURES: tuple[Figure, ...] = (
    Figure("uptime_seconds", "Seconds since start", sys="uptime", metric="uptime_seconds",
           api=True),
    Figure("connections", "Clients connected (past CONNECT)", sys="clients/connected",
           metric="connections", api=True),
    Figure("sessions", "Sessions, connected or not", sys="clients/total", metric="sessions",
           api=True),
    Figure("max_connections", "The configured connection limit (0: none)",
           sys="clients/maximum"),
    Figure("connections_accepted", "Connections accepted since start", COUNTER,
           metric="connections_accepted"),
    Figure("subscriptions", "Subscriptions, MQ named ones included", sys="subscriptions/count",
           metric="subscriptions", api=True),
    Figure("subscriptions_refused", "Subscriptions refused by max_subscriptions_per_client",
           COUNTER, sys="subscriptions/refused"),
    Figure("topics", "Distinct topic filters subscribed to", metric="topics"),
    Figure("filters_skipped", "Filtered subscriptions past their owner's max_filter_time", COUNTER,
           sys="filters/skipped"),
    Figure("retained_messages", "Retained messages", sys="retained messages/count",
           metric="retained_messages", api=True),
    Figure("retained_bytes", "Topic and payload bytes of retained messages",
           sys="retained messages/bytes", metric="retained_bytes"),
    Figure("retained_refused", "Publications not retained: beyond the retained quotas",
           COUNTER, sys="retained messages/refused"),
    Figure("topic_cache_bytes", "Characters of topic names the routing caches hold",
           sys="topic cache/bytes"),
    Figure("authentication_failures",
           "Connections refused for who the client is (CONNACK 4 or 5, 0x86, 0x87)", COUNTER,
           metric="authentication_failures"),
    Figure("publish_denied", _DENIED, COUNTER, sys="publish/messages/denied",
           metric="authorization_denied", labels=(("action", "publish"),)),
    Figure("subscribe_denied", _DENIED, COUNTER, metric="authorization_denied",
           labels=(("action", "subscribe"),)),
    Figure("publish_received", "PUBLISH packets received (including retries)", COUNTER,
           sys="publish/messages/received"),
    Figure("messages_received", _RECEIVED, COUNTER, sys="messages/received", api=True),
    Figure("received_qos0", _RECEIVED, COUNTER, metric="messages_received",
           labels=(("qos", "0"),)),
    Figure("received_qos1", _RECEIVED, COUNTER, metric="messages_received",
           labels=(("qos", "1"),)),
    Figure("received_qos2", _RECEIVED, COUNTER, metric="messages_received",
           labels=(("qos", "2"),)),
    Figure("messages_sent", _SENT, COUNTER, sys="messages/sent", api=True),
    Figure("sent_qos0", _SENT, COUNTER, metric="messages_sent", labels=(("qos", "0"),)),
    Figure("sent_qos1", _SENT, COUNTER, metric="messages_sent", labels=(("qos", "1"),)),
    Figure("sent_qos2", _SENT, COUNTER, metric="messages_sent", labels=(("qos", "2"),)),
    Figure("messages_acked", "PUBACK and PUBCOMP from subscribers", COUNTER,
           metric="messages_acked"),
    Figure("messages_dropped", _DROPPED, COUNTER, sys="messages/dropped", api=True),
    Figure("messages_expired", _DROPPED, COUNTER, sys="messages/dropped/expired",
           metric="messages_dropped", labels=(("reason", "expired"),)),
    Figure("messages_too_large", _DROPPED, COUNTER, sys="messages/dropped/too large",
           metric="messages_dropped", labels=(("reason", "too_large"),)),
    Figure("messages_dropped_other", _DROPPED, COUNTER, metric="messages_dropped",
           labels=(("reason", "other"),)),
    Figure("bytes_received", "Bytes read from clients", COUNTER, sys="bytes/received",
           metric="bytes_received", api=True),
    Figure("bytes_sent", "Bytes written to clients", COUNTER, sys="bytes/sent",
           metric="bytes_sent", api=True),
    Figure("commands", "MQ command messages executed", COUNTER, sys="commands/received",
           metric="commands"),
    Figure("sparkplug_invalid", "Publications under spBv1.0/ that are not Sparkplug B (topic,"
           " payload, duplicate aliases): routed, never kept as certificates", COUNTER,
           sys="sparkplug/invalid", metric="sparkplug_invalid", api=True),
    Figure("store_commits", "Store transactions committed", COUNTER, metric="store_commits"),
    Figure("store_pauses", "Clients paused until a commit ended: their writes filled the backlog",
           COUNTER, sys="store/pauses", metric="store_pauses"),
    Figure("reads_held", "Reads after which a client waited for a later turn of the loop",
           COUNTER, sys="load/reads held", metric="reads_held"),
    Figure("store_bytes", "Bytes of the store's files", sys="store/bytes",
           metric="store_bytes"),
    Figure("store_quarantined", "Damaged store records set aside at start-up",
           sys="store/quarantined"),
    Figure("journal_rows", "Rows in the journal", sys="journal/rows", metric="journal_rows"),
    Figure("journal_last_seq", "The last journal seq assigned", sys="journal/last_seq",
           metric="journal_last_seq", api=True),
    Figure("journal_trimmed", "Journal rows deleted by retention", COUNTER,
           sys="journal/trimmed", metric="journal_trimmed"),
    Figure("ha_active", "1 while this broker is the active one of its group (always, without"
           " [ha]), 0 while it stands by", sys="ha/active", metric="ha_active"),
    Figure("ha_takeovers", "Times this broker won the election and became active ([ha])",
           COUNTER, sys="ha/takeovers", metric="ha_takeovers", api=True),
)  # fmt: skip


@dataclass(slots=True)
class Overview:
    """Every figure of one broker, read at one moment (`BrokerView.overview`)."""

    version: str  # telemq's (`0.1.0`)
    values: dict[str, float]
    peers: dict[str, list[PeerCounters]] = field(default_factory=dict)  # by kind
    role: str = ACTIVE  # in its group ([ha]): "active" or "standby"


class Operations(Protocol):
    """What an administrator may change: the embedding API's operations, which MQTT and
    the MQ commands go through too (`Broker` implements them)."""

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        sub_point: str = "",
        journal: bool = True,
    ) -> None: ...

    def delete_retained(self, sub_point: str, topic: str, network: bool = False) -> bool: ...


class BrokerView:
    """What the operators' reports read of a running broker (see the module docstring).

    Built by the wiring once the rooms exist; `peers` gives the links' and bridges'
    counters, `quarantined` the records the store set aside at start-up, `leadership` the
    broker's role in its group (leadership.py).
    """

    def __init__(
        self,
        rooms: CoreRooms,
        store: Store,
        executor: Executor | None,
        quarantined: Callable[[], int],
        peers: Callable[[], dict[str, list[PeerCounters]]],
        leadership: Leadership | None = None,
    ) -> None:
        self.rooms = rooms
        self.leadership = leadership if leadership is not None else Leadership()
        self.store = store
        self.executor = executor  # the store's thread (None: the memory store, inline)
        self._quarantined = quarantined
        self._peers = peers
        self.started_at = time.monotonic()
        # The store's sizes, read on its own thread: as of the last refresh (sys.interval).
        self.store_stats = StoreStats()

    def mark_started(self) -> None:
        """The broker is listening: uptime counts from now."""
        self.started_at = time.monotonic()

    async def refresh_store_stats(self) -> None:
        if self.executor is not None:
            loop = asyncio.get_running_loop()
            self.store_stats = await loop.run_in_executor(self.executor, self.store.stats)
        else:
            self.store_stats = self.store.stats()

    def bytes_moved(self) -> tuple[int, int]:
        """Bytes received from and sent to clients since start, connected ones included."""
        stats = self.rooms.stats
        received, sent = stats.bytes_received_closed, stats.bytes_sent_closed
        for client in self.rooms.sessions.clients:
            connection = client.connection
            if connection is not None:
                received += connection.bytes_received
                sent += connection.bytes_sent
        return received, sent

    def peer_counters(self) -> dict[str, list[PeerCounters]]:
        return self._peers()

    def overview(self) -> Overview:
        """Every figure of `FIGURES`, read now."""
        rooms = self.rooms
        stats, sessions, registry, retained = (
            rooms.stats,
            rooms.sessions,
            rooms.registry,
            rooms.retained,
        )
        store_stats = self.store_stats
        bytes_received, bytes_sent = self.bytes_moved()
        received, sent = stats.received_by_qos, stats.sent_by_qos
        dropped = stats.messages_dropped
        values: dict[str, float] = {
            "uptime_seconds": time.monotonic() - self.started_at,
            "connections": sessions.connected,
            "sessions": len(sessions.by_id),
            "max_connections": rooms.config.limits.max_connections,
            "connections_accepted": stats.clients_total_ever,
            "subscriptions": len(registry),
            "subscriptions_refused": stats.subscriptions_refused,
            "topics": registry.topic_filters,
            "filters_skipped": registry.filters_skipped,
            "retained_messages": retained.count(),
            "retained_bytes": retained.bytes,
            "retained_refused": stats.retained_refused,
            "topic_cache_bytes": registry.cache_bytes + rooms.router.cache_bytes,
            "authentication_failures": stats.authentication_failures,
            "publish_denied": stats.publish_denied,
            "subscribe_denied": stats.subscribe_denied,
            "publish_received": stats.publish_received,
            "messages_received": sum(received),
            "received_qos0": received[0],
            "received_qos1": received[1],
            "received_qos2": received[2],
            "messages_sent": sum(sent),
            "sent_qos0": sent[0],
            "sent_qos1": sent[1],
            "sent_qos2": sent[2],
            "messages_acked": stats.messages_acked,
            "messages_dropped": dropped,
            "messages_expired": stats.messages_expired,
            "messages_too_large": stats.messages_too_large,
            "messages_dropped_other": max(
                dropped - stats.messages_expired - stats.messages_too_large, 0
            ),
            "bytes_received": bytes_received,
            "bytes_sent": bytes_sent,
            "commands": stats.commands,
            "sparkplug_invalid": stats.sparkplug_invalid,
            "store_commits": rooms.committer.commits,
            "store_pauses": rooms.hub.store_pauses,
            "reads_held": rooms.hub.reads_held,
            "store_bytes": store_stats.bytes_on_disk,
            "store_quarantined": max(self._quarantined(), store_stats.quarantined),
            "journal_rows": store_stats.journal_rows,
            "journal_last_seq": rooms.router.next_seq - 1,
            "journal_trimmed": stats.journal_trimmed,
            "ha_active": int(self.leadership.is_active),
            "ha_takeovers": self.leadership.takeovers,
        }
        return Overview(__version__, values, self._peers(), self.leadership.role)
