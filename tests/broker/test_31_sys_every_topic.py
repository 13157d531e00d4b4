"""Every one of the 25 `$SYS/broker/...` topics of the README, each seen to move.

In process: a broker on a SQLite store in a temporary directory, MQTT clients over in-memory
connections, and an in-process subscriber to `$SYS/#` that reads what the broker publishes
(`SysReporter.publish` is called where the test needs a refresh, instead of waiting for the
interval). Each topic is read before and after something that must change it.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from telemq.broker import BrokerConfig, Hook
from telemq.broker.edges.listeners import MemoryListener
from telemq.broker.embedded import LocalSubscription
from telemq.broker.operations.view import FIGURES
from telemq.broker.security.acl import Action
from telemq.broker.server import Broker
from telemq.filters import compile_filter
from telemq.protocol import Connect, Disconnect, Publish, Subscribe
from telemq.protocol.packets import PubAck, SubAck
from telemq.store import SessionRecord, SqliteStore, SubscriptionRecord, WriteBatch
from telemq.subscriptions import Identity, Subscription

from .test_29_seams import MemoryPeer

README_TOPICS = [
    "version",
    "uptime",
    "clients/connected",
    "clients/total",
    "clients/maximum",
    "messages/received",
    "messages/sent",
    "messages/dropped",
    "messages/dropped/too large",
    "messages/dropped/expired",
    "publish/messages/received",
    "publish/messages/denied",
    "commands/received",
    "bytes/received",
    "bytes/sent",
    "subscriptions/count",
    "subscriptions/refused",
    "filters/skipped",
    "retained messages/count",
    "retained messages/bytes",
    "retained messages/refused",
    "topic cache/bytes",
    "store/bytes",
    "store/quarantined",
    "store/pauses",
    "load/reads held",
    "journal/rows",
    "journal/last_seq",
    "journal/trimmed",
    "ha/active",
    "ha/takeovers",
    "sparkplug/invalid",
]


class DenyUnderDenied(Hook):
    def authorize(self, action: Action, topic: str, user_id: str, client_id: str) -> bool | None:
        return not topic.startswith("denied/")


class SysReader:
    """The latest value of every `$SYS/broker/` topic, from an in-process subscription."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.subscription: LocalSubscription = broker.subscribe("$SYS/broker/#", qos=0)
        self.values: dict[str, str] = {}

    async def refresh(self) -> dict[str, str]:
        await self.broker.sys.publish()
        while True:
            try:
                received = await asyncio.wait_for(self.subscription.get(), 0.2)
            except TimeoutError:
                return dict(self.values)
            self.values[received.topic.removeprefix("$SYS/broker/")] = received.payload.decode()

    async def number(self, topic: str) -> int:
        return int((await self.refresh())[topic])


def damaged_store(data_dir: Path) -> None:
    """A store holding one subscription record that cannot be read (no id, no topic)."""
    data_dir.mkdir(parents=True)
    store = SqliteStore(data_dir / "telemq.db", "off")
    store.load()
    batch = WriteBatch()
    batch.put_session(SessionRecord("old-queue", {"sub_point": "", "user_id": ""}))
    batch.put_subscription(SubscriptionRecord("old-queue", "1", {"queue": "old-queue"}))
    store.commit(batch)
    store.close()


def test_every_sys_topic_is_published_and_moves(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    damaged_store(data_dir)
    config = BrokerConfig()
    config.sys.interval = 0  # refreshed by the test
    config.store.data_dir = str(data_dir)
    config.store.sync = "off"
    config.limits.max_connections = 50
    config.limits.max_queued_messages = 1
    config.limits.max_subscriptions_per_client = 1
    config.limits.max_retained_messages = 1
    config.limits.max_filter_time = 1e-9  # spent by the first filter evaluated
    config.journal.max_rows = 2
    listener = MemoryListener()

    async def main() -> None:
        async with Broker(config, hooks=[DenyUnderDenied()], listeners=[listener]) as broker:
            sys = SysReader(broker)
            first = await sys.refresh()
            assert sorted(first) == sorted(README_TOPICS)
            assert re.fullmatch(r"telemq \d+\.\d+\.\d+", first["version"])
            assert first["clients/maximum"] == "50"
            assert first["store/quarantined"] == "1"  # the damaged subscription record
            uptime = int(first["uptime"].removesuffix(" seconds"))

            before = dict(first)
            subscriber, _ = await MemoryPeer.connect(listener, "sub")
            subscriber.send(Subscribe(1, [("t/#", 1), ("t/one-too-many", 1)]))
            assert await subscriber.next() == SubAck(1, [1, 0x80])
            offline = await listener.connect()
            offline_peer = MemoryPeer(offline)
            offline_peer.send(Connect("offline", clean_session=False))
            await offline_peer.next()
            offline_peer.send(Subscribe(1, [("q/#", 1)]))
            assert isinstance(await offline_peer.next(), SubAck)
            offline_peer.send(Disconnect())
            # Two filtered subscriptions of one owner: its first filter is evaluated
            # whatever it costs, the second is never reached in time.
            for text in ("n = 1", "n = 2"):
                broker.registry.add(
                    Subscription(
                        id=broker.registry.new_id(),
                        identity=Identity(broker.config.name, "sub"),
                        topic="t/x",
                        filter_text=text,
                        compiled=compile_filter(text),
                    )
                )
            publisher, _ = await MemoryPeer.connect(listener, "pub")
            for n in range(5):
                publisher.send(Publish("t/x", b"%d" % n, 1, packet_id=n + 1))
                assert await publisher.next() == PubAck(n + 1)
                assert isinstance(await subscriber.next(), Publish)
            publisher.send(Publish("t/kept", b"retained", 0, retain=True))
            publisher.send(Publish("t/not-kept", b"one too many", 0, retain=True))
            publisher.send(Publish("denied/x", b"no", 0))
            publisher.send(Publish("spBv1.0/G/NBIRTH/E", b"\xff not Sparkplug B", 0))
            for packet_id in (9, 10, 11):  # a queue of one, offline: two are dropped
                publisher.send(Publish("q/x", b"queued", 1, packet_id=packet_id))
                assert await publisher.next() == PubAck(packet_id)
            publisher.send(Publish("SYSTEM.BROKER.CONTROL.QUEUE", b"not a command", 0))
            publisher.send(Publish("t/sentinel", b"after the command", 1, packet_id=12))
            assert await publisher.next() == PubAck(12)  # the command ran before it
            assert isinstance(await subscriber.next(), Publish)
            await broker.committer.drain()
            after = await sys.refresh()
            moved = {
                "clients/connected": 2,  # sub and pub; the offline one left
                "clients/total": 3,
                "subscriptions/count": 4,
                "subscriptions/refused": 1,
                "filters/skipped": 5,
                "retained messages/count": 1,
                "retained messages/bytes": len(b"t/keptretained"),
                "retained messages/refused": 1,
                "publish/messages/denied": 1,
                "commands/received": 1,
                "messages/dropped": 2,
                "sparkplug/invalid": 1,
                # 5, the 2 retained ones, the Sparkplug one, 3 queued, the sentinel
                "journal/last_seq": 12,
            }
            for topic, delta in moved.items():
                assert int(after[topic]) - int(before[topic]) == delta, (topic, before, after)
            for topic in (
                "messages/received",
                "messages/sent",
                "publish/messages/received",
                "bytes/received",
                "bytes/sent",
                "store/bytes",
                "journal/rows",
                "topic cache/bytes",
            ):
                assert int(after[topic]) > int(before[topic]), (topic, before, after)
            assert int(after["journal/rows"]) == 12

            trimmed = await broker.apply_journal_retention()
            assert trimmed > 0
            after_trim = await sys.refresh()
            assert int(after_trim["journal/trimmed"]) == trimmed
            assert int(after_trim["journal/rows"]) == 2

            await asyncio.sleep(1.1)
            later = await sys.refresh()
            assert int(later["uptime"].removesuffix(" seconds")) > uptime

    asyncio.run(main())


def test_sys_metrics_and_the_api_render_one_overview(tmp_path: Path) -> None:
    """$SYS, /metrics and /api/v1/overview show the figures of one `Overview`: every figure
    `FIGURES` lists is read, every README topic but the version is a figure, and a figure
    shown twice shows the same value in each rendering."""
    config = BrokerConfig()
    config.sys.interval = 0
    config.store.data_dir = str(tmp_path / "data")
    config.limits.max_connections = 7

    async def main() -> None:
        async with Broker(config, listeners=[MemoryListener()]) as broker:
            broker.publish("a/b", b"x", retain=True)
            overview = broker.view.overview()
            assert set(overview.values) == {figure.key for figure in FIGURES}
            shown = {figure.sys: figure for figure in FIGURES if figure.sys}
            assert sorted([*shown, "version"]) == sorted(README_TOPICS)
            sys_values = broker.sys_values()
            for topic, figure in shown.items():
                expected = int(overview.values[figure.key])
                text = sys_values["$SYS/broker/" + topic].removesuffix(" seconds")
                if figure.key != "uptime_seconds":
                    assert int(text) == expected, topic
            assert sys_values["$SYS/broker/clients/maximum"] == "7"
            assert sys_values["$SYS/broker/retained messages/count"] == "1"
            names = {figure.metric for figure in FIGURES if figure.metric}
            assert len(names) == len({(f.metric, f.help) for f in FIGURES if f.metric})

    asyncio.run(main())
