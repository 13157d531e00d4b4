"""The index of retained topics (`broker.retained.TopicIndex`): a subscription finds the
retained messages it matches by walking the filter's levels, so its cost follows what it
matches, not how much is retained (issue: one SUBSCRIBE of 1,000 filters matching nothing
scanned 50,000 retained topics per filter).

Checked against the plain matcher over random topics and filters (`$` topics, empty levels,
`+` and `#` anywhere they are valid), through additions and removals, and in a broker.
"""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from telemq.broker import BrokerConfig
from telemq.broker.core.retained import TopicIndex
from telemq.broker.edges.listeners import MemoryListener
from telemq.broker.server import Broker
from telemq.protocol import Connect, Publish, Subscribe, topic_filter_error, topic_matches
from telemq.protocol.packets import ConnAck, PingReq, PingResp, PubAck, SubAck
from telemq.store import MemoryStore

from .test_29_seams import MemoryPeer

LEVELS = ["a", "b", "", "$SYS", "$x", "c"]


def random_topic(rng: random.Random) -> str:
    topic = ""
    while not topic:  # "" is not a topic name
        topic = "/".join(rng.choice(LEVELS) for _ in range(rng.randint(1, 4)))
    return topic


def random_filter(rng: random.Random) -> str:
    topic_filter = ""
    while not topic_filter:  # "" is not a filter
        levels = [rng.choice([*LEVELS, "+", "+", "#"]) for _ in range(rng.randint(1, 4))]
        if "#" in levels:
            levels = levels[: levels.index("#") + 1]
        topic_filter = "/".join(levels)
    return topic_filter


def test_matches_equal_the_plain_matcher_in_first_retained_order() -> None:
    rng = random.Random(20)
    index = TopicIndex()
    order: list[str] = []
    for _ in range(400):
        topic = random_topic(rng)
        if topic not in order:
            order.append(topic)
        index.add(topic)  # a topic retained again keeps its place
    filters = {random_filter(rng) for _ in range(300)}
    assert all(topic_filter_error(f) is None for f in filters)
    for topic_filter in filters:
        assert index.match(topic_filter) == [t for t in order if topic_matches(topic_filter, t)]
    for topic in order[::2]:
        index.remove(topic)
    index.remove("never/retained")  # nothing to remove: nothing happens
    kept = order[1::2]
    for topic_filter in filters:
        assert index.match(topic_filter) == [t for t in kept if topic_matches(topic_filter, t)]
    for topic in kept:
        index.remove(topic)
    assert index.match("#") == [] and index.match("+/+") == []


def test_a_broker_finds_retained_messages_through_the_index() -> None:
    config = BrokerConfig()
    config.sys.interval = 0

    async def main() -> None:
        async with Broker(config, store=MemoryStore(), listeners=[]) as broker:
            for n in range(2000):
                broker.publish(f"r/{n % 50:03d}/{n:04d}", b"%d" % n, retain=True)
            broker.publish("r/000/0000", b"", retain=True)  # cleared: gone from the index too
            broker.delete_retained("", "r/001/0001")
            assert len(broker.matching_retained("", "r/000/+")) == 39
            assert [m.topic for m in broker.matching_retained("", "r/+/0051")] == ["r/001/0051"]
            assert broker.matching_retained("", "nomatch/1/+") == []
            assert len(broker.matching_retained("", "#")) == 1998
            sub = broker.subscribe("r/002/#", qos=0)
            got = [await asyncio.wait_for(sub.get(), 5) for _ in range(40)]
            assert [r.topic for r in got] == [f"r/002/{n:04d}" for n in range(2, 2000, 50)]

    asyncio.run(main())


def test_retained_messages_beyond_the_queue_are_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A QoS 1 subscription that matches more retained messages than its in-flight window
    and queue hold gets what fits; the rest is dropped, counted in $SYS and logged."""
    config = BrokerConfig()
    config.sys.interval = 0
    config.limits.max_inflight = 3
    config.limits.max_queued_messages = 5
    listener = MemoryListener()

    async def main() -> None:
        async with Broker(config, store=MemoryStore(), listeners=[listener]) as broker:
            for n in range(20):
                broker.publish(f"many/{n:02d}", b"%d" % n, qos=1, retain=True)
            peer, _ = await MemoryPeer.connect(listener, "reader")
            peer.send(Subscribe(1, [("many/+", 1)]))
            assert isinstance(await peer.next(), SubAck)
            first = [await peer.next() for _ in range(3)]  # the in-flight window
            assert [p.payload for p in first if isinstance(p, Publish)] == [b"0", b"1", b"2"]
            for packet in first:
                assert isinstance(packet, Publish)
                peer.send(PubAck(packet.packet_id))
            rest: list[bytes] = []
            for _ in range(5):  # then the queue, as the window frees up
                packet = await peer.next()
                assert isinstance(packet, Publish)
                rest.append(packet.payload)
                peer.send(PubAck(packet.packet_id))
            assert rest == [b"%d" % n for n in range(3, 8)]
            broker.publish("many/live", b"sentinel", qos=1)
            sentinel = await peer.next()  # nothing of the 12 dropped comes before it
            assert isinstance(sentinel, Publish) and sentinel.payload == b"sentinel"
            assert broker.sys_values()["$SYS/broker/messages/dropped"] == "12"

    with caplog.at_level(logging.WARNING, logger="telemq.broker"):
        asyncio.run(main())
    assert "queue 'reader': 12 of 20 retained messages matching 'many/+' dropped" in caplog.text


@pytest.mark.parametrize("persistent", [False, True])
def test_a_large_retained_set_goes_in_slices_and_live_messages_wait_behind_it(
    persistent: bool,
) -> None:
    """The issue's second half: a SUBSCRIBE matching 20,000 retained messages is sent a slice
    at a time (`RETAINED_SLICE`), so another client is answered before it ends; a live
    publication made meanwhile reaches the subscriber after the whole retained set."""
    config = BrokerConfig()
    config.sys.interval = 0
    config.limits.max_queued_messages = 0  # every retained copy is kept (QoS 1 below)
    listener = MemoryListener()
    count = 20_000

    async def main() -> None:
        async with Broker(config, store=MemoryStore(), listeners=[listener]) as broker:
            for n in range(count):
                broker.publish(f"r/{n:05d}", b"%d" % n, qos=1, retain=True)
            subscriber = MemoryPeer(await listener.connect())
            subscriber.send(Connect("sub", clean_session=not persistent))
            assert isinstance(await subscriber.next(), ConnAck)
            sentinel, _ = await MemoryPeer.connect(listener, "sentinel")
            publisher, _ = await MemoryPeer.connect(listener, "pub")
            subscriber.send(Subscribe(1, [("r/#", 0)]))
            publisher.send(Publish("r/live", b"live", 0))
            sentinel.send(PingReq())
            assert isinstance(await sentinel.next(), PingResp)
            assert broker.sessions["sub"].holding == 1, "sent in one go, not in slices"
            payloads: list[bytes] = []
            while len(payloads) < count + 1:
                packet = await subscriber.next()
                if isinstance(packet, Publish):
                    payloads.append(packet.payload)
            assert payloads == [b"%d" % n for n in range(count)] + [b"live"]
            assert broker.sessions["sub"].holding == 0 and not broker.sessions["sub"].held

    asyncio.run(main())
