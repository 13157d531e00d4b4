"""``$SYS/broker/...`` topics, refreshed every second here (``--sys-interval 1``)."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from .helpers import (
    BrokerProcess,
    RawClient,
    collect_until,
    raw_connected,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

RawFactory = Callable[..., RawClient]

SYS_TOPICS = [
    "$SYS/broker/version",
    "$SYS/broker/uptime",
    "$SYS/broker/clients/connected",
    "$SYS/broker/clients/total",
    "$SYS/broker/messages/received",
    "$SYS/broker/messages/sent",
    "$SYS/broker/messages/dropped",
    "$SYS/broker/bytes/received",
    "$SYS/broker/bytes/sent",
    "$SYS/broker/subscriptions/count",
    "$SYS/broker/retained messages/count",
    "$SYS/broker/store/bytes",
    "$SYS/broker/journal/rows",
]
NUMERIC = [t for t in SYS_TOPICS if t not in ("$SYS/broker/version", "$SYS/broker/uptime")]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("sys") / "broker", args=["--sys-interval", "1"])
    b.start()
    yield b
    b.finalize()


class SysWatcher:
    """A raw client subscribed to ``$SYS/#``.

    ``values`` keeps the latest value of every topic, ``live`` only values from refreshes
    that arrived after the subscription (RETAIN=0), which reflect the present state, and
    ``updates`` counts those refreshes per topic."""

    def __init__(self, port: int) -> None:
        self.client = raw_connected(port)
        assert self.client.subscribe([("$SYS/#", 0)]) == [0]
        self.values: dict[str, str] = {}
        self.live: dict[str, str] = {}
        self.updates: Counter[str] = Counter()
        self.retained: dict[str, bool] = {}

    def poll(self, timeout: float) -> None:
        for msg in self.client.collect(1, timeout):
            value = msg.payload.decode()
            self.values[msg.topic] = value
            self.retained.setdefault(msg.topic, msg.retain)
            if not msg.retain:
                self.live[msg.topic] = value
                self.updates[msg.topic] += 1

    def wait_for(
        self,
        predicate: Callable[[dict[str, str]], bool],
        timeout: float = 20,
        *,
        live: bool = True,
    ) -> None:
        """Poll until ``predicate`` holds for the live values (or all values)."""
        deadline = time.monotonic() + timeout
        source = self.live if live else self.values

        def met() -> bool:
            try:
                return predicate(source)
            except KeyError:  # that topic has not arrived yet
                return False

        while not met():
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                self.poll(remaining)
            except TimeoutError:
                raise AssertionError(
                    f"$SYS condition not met within {timeout} s; live values: {self.live}; "
                    f"all values: {self.values}"
                ) from None

    def settled(self, topic: str) -> int:
        """The value of ``topic`` from the second refresh from now on (the first may have
        been computed before the latest change)."""
        target = self.updates[topic] + 2
        self.wait_for(lambda v: self.updates[topic] >= target)
        return int(self.live[topic])

    def number(self, topic: str) -> int:
        return int(self.live[topic])

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def sys_watcher(broker: BrokerProcess) -> Iterator[SysWatcher]:
    watcher = SysWatcher(broker.port)
    yield watcher
    watcher.close()


def test_all_sys_topics_published_with_decimal_values(
    broker: BrokerProcess, sys_watcher: SysWatcher
) -> None:
    sys_watcher.wait_for(lambda v: all(t in v for t in SYS_TOPICS), live=False)
    for topic in NUMERIC:
        assert re.fullmatch(r"\d+", sys_watcher.values[topic]), (topic, sys_watcher.values[topic])
    # Mosquitto's form, which existing dashboards parse.
    assert re.fullmatch(r"\d+ seconds", sys_watcher.values["$SYS/broker/uptime"])
    assert sys_watcher.values["$SYS/broker/version"].strip()


def test_sys_topics_are_retained(broker: BrokerProcess, sys_watcher: SysWatcher) -> None:
    """A subscriber that arrives after the first update gets every value at once, RETAIN=1."""
    sys_watcher.wait_for(lambda v: all(t in v for t in SYS_TOPICS))
    late = SysWatcher(broker.port)
    try:
        late.wait_for(lambda v: all(t in v for t in SYS_TOPICS), live=False)
        assert all(late.retained[t] for t in SYS_TOPICS), late.retained
    finally:
        late.close()


def test_uptime_increases(sys_watcher: SysWatcher) -> None:
    # Only the leading number is read here; the format itself is checked above.
    def uptime(values: dict[str, str]) -> int:
        return int(values["$SYS/broker/uptime"].split()[0])

    sys_watcher.wait_for(lambda v: "$SYS/broker/uptime" in v)
    first = uptime(sys_watcher.live)
    sys_watcher.wait_for(lambda v: uptime(v) > first)


def test_clients_connected_and_total(
    broker: BrokerProcess, sys_watcher: SysWatcher, raw_factory: RawFactory
) -> None:
    base = sys_watcher.settled("$SYS/broker/clients/connected")
    base_total = sys_watcher.number("$SYS/broker/clients/total")
    extra = [raw_factory(broker.port, connected=True) for _ in range(3)]
    sys_watcher.wait_for(lambda v: int(v["$SYS/broker/clients/connected"]) == base + 3)
    sys_watcher.wait_for(lambda v: int(v["$SYS/broker/clients/total"]) >= base_total + 3)
    for client in extra:
        client.disconnect()
    sys_watcher.wait_for(lambda v: int(v["$SYS/broker/clients/connected"]) == base)


def test_message_and_byte_counters(
    broker: BrokerProcess, sys_watcher: SysWatcher, raw_factory: RawFactory
) -> None:
    """The counters grow with traffic and are totals since the start: they do not go down
    when the clients that caused the traffic disconnect."""
    counters = [
        "$SYS/broker/messages/received",
        "$SYS/broker/messages/sent",
        "$SYS/broker/bytes/received",
        "$SYS/broker/bytes/sent",
    ]
    sys_watcher.settled(counters[0])
    before = {t: sys_watcher.number(t) for t in counters}
    topic = unique("cnt/")
    sub = raw_factory(broker.port, connected=True)
    sub.subscribe([(topic, 1)])
    pub = raw_factory(broker.port, connected=True)
    for _ in range(10):
        pub.publish(topic, b"x" * 1000, qos=1)
    sub.collect(10)
    sys_watcher.wait_for(
        lambda v: (
            int(v["$SYS/broker/messages/received"]) >= before[counters[0]] + 10
            and int(v["$SYS/broker/messages/sent"]) >= before[counters[1]] + 10
            and int(v["$SYS/broker/bytes/received"]) >= before[counters[2]] + 10_000
            and int(v["$SYS/broker/bytes/sent"]) >= before[counters[3]] + 10_000
        )
    )
    during = {t: sys_watcher.number(t) for t in counters}
    sub.disconnect()
    pub.disconnect()
    sys_watcher.settled(counters[0])
    sys_watcher.settled(counters[0])
    after = {t: sys_watcher.number(t) for t in counters}
    went_down = {t: (during[t], after[t]) for t in counters if after[t] < during[t]}
    assert not went_down, f"cumulative counters decreased after disconnects: {went_down}"


def test_subscription_count(
    broker: BrokerProcess, sys_watcher: SysWatcher, raw_factory: RawFactory
) -> None:
    key = "$SYS/broker/subscriptions/count"
    base = sys_watcher.settled(key)
    client = raw_factory(broker.port, connected=True)
    client.subscribe([(unique("sc/"), 0), (unique("sc/"), 1)])
    sys_watcher.wait_for(lambda v: int(v[key]) == base + 2)
    client.disconnect()  # clean session: its subscriptions go with it
    sys_watcher.wait_for(lambda v: int(v[key]) == base)


def test_retained_count(
    broker: BrokerProcess, sys_watcher: SysWatcher, raw_factory: RawFactory
) -> None:
    key = "$SYS/broker/retained messages/count"
    base = sys_watcher.settled(key)
    prefix = unique("rc")
    pub = raw_factory(broker.port, connected=True)
    for i in range(3):
        pub.publish(f"{prefix}/{i}", b"r", qos=1, retain=True)
    sys_watcher.wait_for(lambda v: int(v[key]) == base + 3)
    for i in range(3):
        pub.publish(f"{prefix}/{i}", b"", qos=1, retain=True)
    sys_watcher.wait_for(lambda v: int(v[key]) == base)


def test_store_bytes_and_journal_rows(
    broker: BrokerProcess, sys_watcher: SysWatcher, raw_factory: RawFactory
) -> None:
    rows = "$SYS/broker/journal/rows"
    store = "$SYS/broker/store/bytes"
    base_rows = sys_watcher.settled(rows)
    pub = raw_factory(broker.port, connected=True)
    for _ in range(5):
        pub.publish(unique("jr/"), b"journal me", qos=1)
    sys_watcher.wait_for(lambda v: int(v[rows]) >= base_rows + 5 and int(v[store]) > 0)


def test_dollar_topics_not_matched_by_leading_wildcards(
    broker: BrokerProcess, sys_watcher: SysWatcher, raw_factory: RawFactory
) -> None:
    """[MQTT-4.7.2-1]: `#`, `+/...` do not match `$SYS/...`; an explicit `$SYS/...` filter,
    including `$SYS/#` and `$SYS/+/uptime`, does."""
    wild = raw_factory(broker.port, connected=True)
    assert wild.subscribe([("#", 0), ("+/broker/#", 0), ("+/broker/uptime", 0)]) == [0, 0, 0]
    explicit = raw_factory(broker.port, connected=True)
    assert explicit.subscribe([("$SYS/+/uptime", 0)]) == [0]
    # Two uptime updates seen by the explicit subscriber: at least one full $SYS refresh
    # happened while `wild` was subscribed.
    seen = {m.payload for m in explicit.collect(2, timeout=15)}
    while len(seen) < 2:
        seen |= {m.payload for m in explicit.collect(1, timeout=15)}
    sentinel_topic = unique("sentinel/")
    pub = raw_factory(broker.port, connected=True)
    pub.publish(sentinel_topic, b"sentinel", qos=1)
    got = collect_until(wild, b"sentinel")
    # Messages other tests publish at the same time may arrive too; none may be $-topics.
    assert [m.topic for m in got if m.topic.startswith("$")] == []
