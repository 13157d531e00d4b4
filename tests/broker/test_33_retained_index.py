"""The index of retained topics (`broker.retained.TopicIndex`): a subscription finds the
retained messages it matches by walking the filter's levels, so its cost follows what it
matches, not how much is retained (issue: one SUBSCRIBE of 1,000 filters matching nothing
scanned 50,000 retained topics per filter).

Checked against the plain matcher over random topics and filters (`$` topics, empty levels,
`+` and `#` anywhere they are valid), through additions and removals, and in a broker.
"""

from __future__ import annotations

import asyncio
import random

from telemq.broker import BrokerConfig
from telemq.broker.retained import TopicIndex
from telemq.broker.server import Broker
from telemq.protocol import topic_filter_error, topic_matches
from telemq.store import MemoryStore

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
