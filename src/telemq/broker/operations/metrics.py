"""`/metrics`: the broker's counters in the Prometheus text format.

Theory of operation
-------------------
Nothing here runs per message. The rooms keep their plain counters (`BrokerStats`, the
committer's histograms, the links' and bridges' own), as they do for `$SYS`; a scrape reads
them on the event loop (where they are changed, so they need no lock) and `prometheus_client`
renders them. That keeps the library out of the per-message path and makes a scrape cost
what reading the counters costs: a few dozen families, a walk over the sessions for the queue
depths (bench/bench_metrics.py measures it at one scrape a second).

The names follow what operators know from EMQX (`emqx_connections_count`,
`emqx_messages_received`, ...) with the `telemq_` prefix and Prometheus' conventions (a
`_total` counter, base units, labels for the QoS, the reason of a drop, a link's name).
telemq's own: the store's commit and sync times and the group commit's batch sizes
(histograms, observed once per commit), the journal's rows and seqs, queue depths, and each
link's and bridge's state and traffic. docs/operations.md lists every family.

Who may scrape: whoever may read `$SYS/#` (an administrator, or a user the ACL lets subscribe
to it; without an ACL, anyone the HTTP listener authenticates), since the metrics are the
`$SYS` values in another format.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from ... import __version__
from ..core.stats import Histogram, PeerCounters
from ..edges.http import USER, json_error

if TYPE_CHECKING:
    from .view import BrokerView

PREFIX = "telemq_"
QOS_LABELS = ("0", "1", "2")


class BrokerCollector(Collector):
    """One broker's metrics, read when Prometheus asks (see module docstring)."""

    def __init__(self, broker: BrokerView) -> None:
        self._broker = broker

    def collect(self) -> Iterator[Metric]:
        yield from self._clients()
        yield from self._messages()
        yield from self._store()
        yield from self._peers()

    def _clients(self) -> Iterator[Metric]:
        broker = self._broker
        sessions = broker.sessions_room
        stats = broker.stats
        yield _gauge("info", "telemq's version", 1.0, {"version": __version__})
        yield _gauge(
            "uptime_seconds", "Seconds since start", time.monotonic() - broker.sys.started_at
        )
        yield _gauge("connections", "Clients connected (past CONNECT)", sessions.connected)
        yield _gauge("sessions", "Sessions, connected or not", len(sessions.by_id))
        yield _counter(
            "connections_accepted", "Connections accepted since start", stats.clients_total_ever
        )
        yield _gauge("subscriptions", "Subscriptions, MQ named ones included", len(broker.registry))
        yield _gauge(
            "topics", "Distinct topic filters subscribed to", broker.registry.topic_filters
        )
        retained = broker.retained
        yield _gauge("retained_messages", "Retained messages", retained.count())
        yield _gauge(
            "retained_bytes", "Topic and payload bytes of retained messages", retained.bytes
        )
        queued = inflight = 0
        for session in sessions.by_id.values():
            queued += len(session.queue)
            inflight += len(session.flows.outbound)
        depth = GaugeMetricFamily(
            PREFIX + "queued_messages",
            "Deliveries waiting in sessions: in their queues, or sent and not yet acknowledged",
            labels=["state"],
        )
        depth.add_metric(["queued"], queued)
        depth.add_metric(["inflight"], inflight)
        yield depth
        yield _counter(
            "authentication_failures",
            "Connections refused for who the client is (CONNACK 4 or 5, 0x86, 0x87)",
            stats.authentication_failures,
        )
        denied = CounterMetricFamily(
            PREFIX + "authorization_denied",
            "Publications and subscriptions the ACL refused",
            labels=["action"],
        )
        denied.add_metric(["publish"], stats.publish_denied)
        denied.add_metric(["subscribe"], stats.subscribe_denied)
        yield denied

    def _messages(self) -> Iterator[Metric]:
        broker = self._broker
        stats = broker.stats
        received = CounterMetricFamily(
            PREFIX + "messages_received",
            "Publications accepted from clients, MQ Publish commands and links",
            labels=["qos"],
        )
        sent = CounterMetricFamily(
            PREFIX + "messages_sent", "PUBLISH packets sent to subscribers", labels=["qos"]
        )
        for qos in (0, 1, 2):
            received.add_metric([QOS_LABELS[qos]], stats.received_by_qos[qos])
            sent.add_metric([QOS_LABELS[qos]], stats.sent_by_qos[qos])
        yield received
        yield sent
        yield _counter(
            "messages_acked", "PUBACK and PUBCOMP from subscribers", stats.messages_acked
        )
        dropped = CounterMetricFamily(
            PREFIX + "messages_dropped",
            "Deliveries dropped: expired (5.0), too large for the client (5.0), or other"
            " (a full queue, a client not reading, a refused queue)",
            labels=["reason"],
        )
        other = stats.messages_dropped - stats.messages_expired - stats.messages_too_large
        dropped.add_metric(["expired"], stats.messages_expired)
        dropped.add_metric(["too_large"], stats.messages_too_large)
        dropped.add_metric(["other"], max(other, 0))
        yield dropped
        bytes_received, bytes_sent = broker.sys.bytes_moved()
        yield _counter("bytes_received", "Bytes read from clients", bytes_received)
        yield _counter("bytes_sent", "Bytes written to clients", bytes_sent)
        yield _counter("commands", "MQ command messages executed", stats.commands)

    def _store(self) -> Iterator[Metric]:
        broker = self._broker
        committer = broker.committer
        store_stats = broker.sys.store_stats  # as of the last $SYS update (sys.interval)
        yield _counter("store_commits", "Store transactions committed", committer.commits)
        yield _histogram(
            "store_commit_seconds",
            "Time of a store commit (a group commit: one transaction, many messages)",
            committer.commit_seconds,
        )
        yield _histogram(
            "store_sync_seconds",
            "Time of a commit's COMMIT: the fsync with store.sync = full",
            committer.sync_seconds,
        )
        yield _histogram(
            "store_commit_batch_ops",
            "Write operations per commit (group-commit batch sizes)",
            committer.batch_ops,
        )
        yield _gauge("store_bytes", "Bytes of the store's files", store_stats.bytes_on_disk)
        yield _gauge("journal_rows", "Rows in the journal", store_stats.journal_rows)
        yield _gauge(
            "journal_last_seq", "The last journal seq assigned", broker.router.next_seq - 1
        )
        yield _counter(
            "journal_trimmed", "Journal rows deleted by retention", broker.stats.journal_trimmed
        )

    def _peers(self) -> Iterator[Metric]:
        for kind, counters in self._broker.peer_counters().items():
            families = _PeerFamilies(kind)
            for peer in counters:
                families.add(peer)
            yield from families.metrics()


class _PeerFamilies:
    """The families of links (or bridges), a sample per peer, labelled with its name."""

    def __init__(self, kind: str) -> None:
        self._kind = kind
        name = PREFIX + kind
        labels = [kind]
        self.connected = GaugeMetricFamily(
            name + "_connected", f"1 while the {kind} is connected", labels=labels
        )
        self.received = CounterMetricFamily(
            name + "_messages_received", f"Publications that came over the {kind}", labels=labels
        )
        self.sent = CounterMetricFamily(
            name + "_messages_sent", f"Publications sent over the {kind}", labels=labels
        )
        dropped_help = (
            "Copies for the neighbour dropped (its queue full)"
            if kind == "link"
            else "Arrivals no incoming rule maps (dropped)"
        )
        self.dropped = CounterMetricFamily(name + "_messages_dropped", dropped_help, labels=labels)
        self.queued = GaugeMetricFamily(
            name + "_queued_messages", f"Publications waiting for the {kind}", labels=labels
        )

    def add(self, peer: PeerCounters) -> None:
        name = [peer.name]
        self.connected.add_metric(name, 1.0 if peer.state == "connected" else 0.0)
        self.received.add_metric(name, peer.received)
        if peer.sent is not None:  # a bridge does not count what it sends
            self.sent.add_metric(name, peer.sent)
        self.dropped.add_metric(name, peer.dropped)
        self.queued.add_metric(name, peer.queued)

    def metrics(self) -> Iterator[Metric]:
        yield self.connected
        yield self.received
        if self._kind == "link":
            yield self.sent
        yield self.dropped
        yield self.queued


def _gauge(
    name: str, documentation: str, value: float, labels: dict[str, str] | None = None
) -> Metric:
    if labels is None:
        return GaugeMetricFamily(PREFIX + name, documentation, value=value)
    family = GaugeMetricFamily(PREFIX + name, documentation, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def _counter(name: str, documentation: str, value: float) -> Metric:
    return CounterMetricFamily(PREFIX + name, documentation, value=value)


def _histogram(name: str, documentation: str, histogram: Histogram) -> Metric:
    """A `stats.Histogram` as Prometheus' cumulative buckets (`le`), ending with +Inf."""
    buckets: list[tuple[str, float]] = []
    running = 0
    counts = list(histogram.counts)  # a copy: the writer thread may observe meanwhile
    for bound, count in zip(histogram.bounds, counts, strict=False):
        running += count
        buckets.append((repr(bound), running))
    buckets.append(("+Inf", running + counts[-1]))
    return HistogramMetricFamily(
        PREFIX + name, documentation, buckets=buckets, sum_value=histogram.total
    )


class MetricsRoute:
    """`GET /metrics` on an HTTP listener (installed by web.py)."""

    open_paths: tuple[str, ...] = ()

    def __init__(self, broker: BrokerView, may_watch: Callable[[str], bool]) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(BrokerCollector(broker))
        self._may_watch = may_watch

    def install(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self._metrics)

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        user: str = request[USER]
        if not self._may_watch(user):
            return json_error(403, "not authorized to read the broker's metrics ($SYS/#)")
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self._registry), headers={"Content-Type": content_type})
