"""Quotas (docs/security.md "Limits"): what one client can make the broker keep.

Each quota is a `[limits]` setting with a generous default, refused the way the protocol
allows, and counted in `$SYS`: subscriptions per session (SUBACK 0x80, MQ 3094), retained
messages by count and bytes (the publication is delivered but not retained), queued bytes per
session (the delivery is dropped, as beyond `max_queued_messages`), and the bytes of topic
names the routing caches keep (1,000 distinct 64 KB topic names pinned 67 MB for good).

In process: MQTT clients over in-memory connections, `$SYS` read from an in-process
subscription (test_31's `SysReader`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from telemq.broker import BrokerConfig
from telemq.broker.edges.listeners import MemoryListener
from telemq.broker.server import Broker
from telemq.protocol import Connect, Disconnect, Publish, Subscribe, Unsubscribe
from telemq.protocol.packets import PubAck, SubAck, UnsubAck
from telemq.store import MemoryStore

from .test_29_seams import MemoryPeer
from .test_31_sys_every_topic import SysReader

FAILURE = 0x80


def run_with(
    configure: Callable[[BrokerConfig], None], test: Callable[..., Awaitable[None]]
) -> None:
    config = BrokerConfig()
    config.sys.interval = 0
    configure(config)
    listener = MemoryListener()

    async def main() -> None:
        async with Broker(config, store=MemoryStore(), listeners=[listener]) as broker:
            await test(broker, listener)

    asyncio.run(main())


async def subscribe(peer: MemoryPeer, packet_id: int, *filters: str) -> list[int]:
    peer.send(Subscribe(packet_id, [(f, 1) for f in filters]))
    ack = await peer.next()
    assert isinstance(ack, SubAck) and ack.packet_id == packet_id
    return list(ack.return_codes)


def test_subscriptions_per_session() -> None:
    def configure(config: BrokerConfig) -> None:
        config.limits.max_subscriptions_per_client = 3

    async def test(broker: Broker, listener: MemoryListener) -> None:
        sys = SysReader(broker)
        client, _ = await MemoryPeer.connect(listener, "many")
        assert await subscribe(client, 1, "a", "b", "c", "d") == [1, 1, 1, FAILURE]
        assert await subscribe(client, 2, "a") == [1], "a filter it holds is a replacement"
        client.send(Unsubscribe(3, ["b"]))
        assert isinstance(await client.next(), UnsubAck)
        assert await subscribe(client, 4, "d", "e") == [1, FAILURE]
        values = await sys.refresh()
        assert values["subscriptions/refused"] == "2"
        # An MQ RegSub for the same queue: nothing registered, 3094 naming the limit.
        client.send(Subscribe(5, [("SYSTEM.BROKER.RESPONSE/many", 0)]))
        assert await client.next() == SubAck(5, [FAILURE])  # the quota counts it too
        other, _ = await MemoryPeer.connect(listener, "other")
        assert await subscribe(other, 1, "SYSTEM.BROKER.RESPONSE/other") == [1]
        command = {"psc": {"Command": "RegSub", "Topic": ["x", "y", "z"], "QName": "other"}}
        other.send(Publish("SYSTEM.BROKER.CONTROL.QUEUE", json.dumps(command).encode(), 0))
        reply = await other.next()
        assert isinstance(reply, Publish)
        pscr = json.loads(reply.payload)["pscr"]
        assert pscr["Completion"] == "error" and pscr["Response"][0]["Reason"] == 3094, pscr
        assert "max_subscriptions_per_client" in pscr["Detail"]
        assert len(broker.registry.of_queue("other")) == 1

    run_with(configure, test)


def test_retained_messages_by_count_and_bytes() -> None:
    def configure(config: BrokerConfig) -> None:
        config.limits.max_retained_messages = 2
        config.limits.max_retained_bytes = 1000

    async def test(broker: Broker, listener: MemoryListener) -> None:
        sys = SysReader(broker)
        reader, _ = await MemoryPeer.connect(listener, "reader")
        assert await subscribe(reader, 1, "r/#") == [1]
        publisher, _ = await MemoryPeer.connect(listener, "pub")
        for topic, payload in [("r/1", b"one"), ("r/2", b"two"), ("r/3", b"three")]:
            publisher.send(Publish(topic, payload, 0, retain=True))
            delivered = await reader.next()
            assert isinstance(delivered, Publish) and delivered.payload == payload
        assert [m.topic for m in broker.matching_retained("", "r/#")] == ["r/1", "r/2"]
        publisher.send(Publish("r/1", b"one, replaced", 0, retain=True))  # not a new one
        publisher.send(Publish("r/2", b"x" * 1000, 0, retain=True))  # 1,000 bytes: too many
        publisher.send(Publish("r/2", b"", 0, retain=True))  # removed: room for r/3
        publisher.send(Publish("r/3", b"three", 0, retain=True))
        for _ in range(4):
            await reader.next()
        kept = {m.topic: m.payload for m in broker.matching_retained("", "r/#")}
        assert kept == {"r/1": b"one, replaced", "r/3": b"three"}
        values = await sys.refresh()
        assert values["retained messages/refused"] == "2"
        assert values["retained messages/bytes"] == str(len(b"r/1one, replacedr/3three"))

    run_with(configure, test)


def test_queued_bytes_per_session() -> None:
    def configure(config: BrokerConfig) -> None:
        config.limits.max_queued_bytes = 1000

    async def test(broker: Broker, listener: MemoryListener) -> None:
        sys = SysReader(broker)
        before = int((await sys.refresh())["messages/dropped"])
        offline = MemoryPeer(await listener.connect())
        offline.send(Connect("offline", clean_session=False))
        await offline.next()
        assert await subscribe(offline, 1, "q/#") == [1]
        offline.send(Disconnect())
        publisher, _ = await MemoryPeer.connect(listener, "pub")
        for n in range(5):  # 300 bytes each with the topic: three fit in 1,000
            publisher.send(Publish("q/x", bytes([n]) * 297, 1, packet_id=n + 1))
            assert await publisher.next() == PubAck(n + 1)
        assert broker.sessions["offline"].queued_bytes == 900
        values = await sys.refresh()
        assert int(values["messages/dropped"]) - before == 2
        back = MemoryPeer(await listener.connect())
        back.send(Connect("offline", clean_session=False))
        await back.next()
        got = [await back.next() for _ in range(3)]
        assert [p.payload[0] for p in got if isinstance(p, Publish)] == [0, 1, 2]
        assert broker.sessions["offline"].queued_bytes == 0

    run_with(configure, test)


def test_topic_name_caches_keep_bounded_bytes() -> None:
    def configure(config: BrokerConfig) -> None:
        config.limits.max_topic_cache_bytes = 100_000

    async def test(broker: Broker, listener: MemoryListener) -> None:
        sys = SysReader(broker)
        reader, _ = await MemoryPeer.connect(listener, "reader")
        assert await subscribe(reader, 1, "big/#") == [1]
        publisher, _ = await MemoryPeer.connect(listener, "pub")
        for n in range(100):  # 100 distinct topic names of 10 KB: 1 MB of names
            topic = f"big/{n:04d}/" + "t" * 10_000
            publisher.send(Publish(topic, b"", 1, packet_id=n + 1))
            assert await publisher.next() == PubAck(n + 1)
            await reader.next()
        values = await sys.refresh()
        assert 0 < int(values["topic cache/bytes"]) <= 2 * 100_000  # each cache bounded

    run_with(configure, test)
