"""`/metrics`: the broker's counters in the Prometheus text format.

Theory of operation
-------------------
Nothing here runs per message. The rooms keep their plain counters, as they do for `$SYS`; a
scrape takes the view's `Overview` (view.py) on the event loop, where they are changed, so
they need no lock, and renders every figure that names a family in `view.FIGURES`, then
what only `/metrics` shows: the store's histograms (observed once per commit), the queue
depths (a walk over the sessions) and each link's and bridge's counters. `prometheus_client`
renders them, which keeps the library out of the per-message path and makes a scrape cost
what reading the counters costs (bench/bench_metrics.py measures it at one scrape a second).

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

from collections.abc import Callable, Iterator

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

from ..core.stats import Histogram, PeerCounters
from ..edges.http import USER
from ..edges.http_errors import json_error
from .view import COUNTER, FIGURES, BrokerView, Overview

PREFIX = "telemq_"
QOS_LABELS = ("0", "1", "2")


class BrokerCollector(Collector):
    """One broker's metrics, read when Prometheus asks (see module docstring)."""

    def __init__(self, view: BrokerView) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        overview = self._view.overview()
        yield _gauge("info", "telemq's version", 1.0, {"version": overview.version})
        yield from _figures(overview)
        yield from self._depths()
        yield from self._histograms()
        for kind, counters in overview.peers.items():
            families = _PeerFamilies(kind)
            for peer in counters:
                families.add(peer)
            yield from families.metrics()

    def _depths(self) -> Iterator[Metric]:
        queued = inflight = 0
        for session in self._view.rooms.sessions.by_id.values():
            queued += len(session.queue)
            inflight += len(session.outbound)
        depth = GaugeMetricFamily(
            PREFIX + "queued_messages",
            "Deliveries waiting in sessions: in their queues, or sent and not yet acknowledged",
            labels=["state"],
        )
        depth.add_metric(["queued"], queued)
        depth.add_metric(["inflight"], inflight)
        yield depth

    def _histograms(self) -> Iterator[Metric]:
        committer = self._view.rooms.committer
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


def _figures(overview: Overview) -> Iterator[Metric]:
    """The figures that have a family (`view.FIGURES`), a family per name, labelled
    samples in it (received by QoS, dropped by reason, ...)."""
    families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    for figure in _METRIC_FIGURES:
        value = overview.values[figure.key]
        family = families.get(figure.metric)
        if family is None:
            kind = CounterMetricFamily if figure.kind == COUNTER else GaugeMetricFamily
            name, labels = PREFIX + figure.metric, [label for label, _ in figure.labels]
            if labels:
                family = kind(name, figure.help, labels=labels)
            else:
                family = kind(name, figure.help, value=value)
            families[figure.metric] = family
        if figure.labels:
            family.add_metric([label_value for _, label_value in figure.labels], value)
    yield from families.values()


_METRIC_FIGURES = tuple(figure for figure in FIGURES if figure.metric)


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

    def __init__(self, view: BrokerView, may_watch: Callable[[str], bool]) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(BrokerCollector(view))
        self._may_watch = may_watch

    def install(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self._metrics)

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        user: str = request[USER]
        if not self._may_watch(user):
            return json_error(403, "not authorized to read the broker's metrics ($SYS/#)")
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self._registry), headers={"Content-Type": content_type})
