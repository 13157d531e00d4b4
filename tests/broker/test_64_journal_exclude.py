"""`[journal] exclude`: publications on the topics its filters match stay out of the journal.

The default (`$SYS/#`) can only match topics starting with "$", so the router journals every
other topic without looking it up; a filter that can match other topics (`noise/#`, `+/x`)
sends every topic through the lookup. Both paths, against the journal as the store has it.
"""

from __future__ import annotations

import asyncio

from telemq.broker import BrokerConfig
from telemq.broker.edges.listeners import MemoryListener
from telemq.broker.server import Broker
from telemq.protocol import Connect, Publish
from telemq.protocol.packets import PubAck
from telemq.store import MemoryStore

from .test_29_seams import MemoryPeer


def journaled_topics(exclude: list[str] | None, topics: list[str]) -> list[str]:
    """Publish once at QoS 1 on each of `topics`; the topics the journal then holds."""
    config = BrokerConfig()
    config.sys.interval = 0
    if exclude is not None:
        config.journal.exclude = exclude
    listener = MemoryListener()
    store = MemoryStore()
    topics_kept: list[str] = []

    async def main() -> None:
        async with Broker(config, store=store, listeners=[listener]):
            publisher = MemoryPeer(await listener.connect())
            publisher.send(Connect("journal-exclude"))
            await publisher.next()
            for packet_id, topic in enumerate(topics, 1):
                publisher.send(Publish(topic, b"x", 1, packet_id=packet_id))
                assert await publisher.next() == PubAck(packet_id)  # committed
            topics_kept.extend(record.topic for record in store.read_journal(1, 1 << 62))

    asyncio.run(main())
    return topics_kept


TOPICS = ["data/a", "noise/a", "noise", "a/x", "a/x/y", "data/a"]


def test_the_default_exclusion_journals_every_topic_outside_sys() -> None:
    assert journaled_topics(None, TOPICS) == TOPICS


def test_a_filter_of_plain_topics_keeps_them_out() -> None:
    assert journaled_topics(["$SYS/#", "noise/#"], TOPICS) == ["data/a", "a/x", "a/x/y", "data/a"]


def test_a_wildcard_filter_keeps_out_what_it_matches() -> None:
    assert journaled_topics(["+/x"], TOPICS) == ["data/a", "noise/a", "noise", "a/x/y", "data/a"]
