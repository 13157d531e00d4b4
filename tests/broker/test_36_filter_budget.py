"""Content-filter budgets in a broker (docs/security.md "Limits").

The issue's attack: RegSubs of 65 KB filters (3,004 ``s LIKE '%...%' OR ...`` terms), then a
60 KB publication, held every client for 5.7 s. Now a filter has at most
size `limits.max_filter_size` (its nodes) and a user's filters `max_filter_size_per_user` (3150
naming the limit), and one user's filters spend at most `max_filter_time` on a publication:
that user's subscriptions past it are skipped and counted in `$SYS/broker/filters/skipped`
(another user's are evaluated: test_57).

In process: MQTT clients over in-memory connections.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
from typing import Any

from telemq.broker import BrokerConfig
from telemq.broker.edges.listeners import MemoryListener
from telemq.broker.server import Broker
from telemq.protocol import Publish, Subscribe
from telemq.protocol.packets import PingReq, PingResp, PubAck, SubAck
from telemq.store import MemoryStore

from .test_29_seams import MemoryPeer
from .test_31_sys_every_topic import SysReader

RESPONSE = "SYSTEM.BROKER.RESPONSE/"


def like_filter(rng: random.Random, terms: int, letters: int = 12) -> str:
    words = (
        "".join(rng.choice(string.ascii_lowercase) for _ in range(letters)) for _ in range(terms)
    )
    return " OR ".join(f"s LIKE '%{word}%'" for word in words)


async def commander(listener: MemoryListener, client_id: str) -> MemoryPeer:
    peer, _ = await MemoryPeer.connect(listener, client_id)
    peer.send(Subscribe(1, [(RESPONSE + client_id, 0)]))
    assert isinstance(await peer.next(), SubAck)
    return peer


async def regsub(peer: MemoryPeer, psc: dict[str, Any]) -> dict[str, Any]:
    peer.send(Publish("SYSTEM.BROKER.CONTROL.QUEUE", json.dumps({"psc": psc}).encode(), 0))
    reply = await peer.next(timeout=30.0)
    assert isinstance(reply, Publish)
    pscr: dict[str, Any] = json.loads(reply.payload)["pscr"]
    return pscr


def test_filters_beyond_their_budgets_are_3150_and_publications_stay_bounded() -> None:
    config = BrokerConfig()
    config.sys.interval = 0
    config.limits.max_packet_size = 256 * 1024
    listener = MemoryListener()
    rng = random.Random(36)
    terms = 127  # each LIKE is 2 nodes (the test and its field), the OR one: size 255

    async def main() -> None:
        async with Broker(config, store=MemoryStore(), listeners=[listener]) as broker:
            sys = SysReader(broker)
            attacker = await commander(listener, "attacker")
            # The filter: 3,004 LIKE terms in 65 KB.
            huge = like_filter(rng, 3004, letters=5)
            assert 60_000 < len(huge) < 65_536
            pscr = await regsub(attacker, {"Command": "RegSub", "Topic": ["h"], "Filter": huge})
            assert pscr["Completion"] == "error" and pscr["Response"][0]["Reason"] == 3150
            assert "limits.max_filter_size" in pscr["Detail"], pscr["Detail"]
            # A user's budget (16,384): 64 filters of size 255; the 65th is refused.
            for n in range(64):
                text = like_filter(rng, terms)
                psc = {"Command": "RegSub", "Topic": ["h"], "Filter": text, "QName": f"a{n}"}
                pscr = await regsub(attacker, psc)
                assert pscr["Completion"] == "ok", pscr
            assert broker.registry.filter_size_of("") == 64 * (2 * terms + 1)
            text = like_filter(rng, terms)
            psc = {"Command": "RegSub", "Topic": ["h"], "Filter": text, "QName": "a64"}
            pscr = await regsub(attacker, psc)
            assert pscr["Completion"] == "error" and pscr["Response"][0]["Reason"] == 3150
            assert "limits.max_filter_size_per_user" in pscr["Detail"]

            plain, _ = await MemoryPeer.connect(listener, "plain")
            plain.send(Subscribe(1, [("h", 1)]))
            assert isinstance(await plain.next(), SubAck)
            sentinel, _ = await MemoryPeer.connect(listener, "sentinel")
            publisher, _ = await MemoryPeer.connect(listener, "publisher")
            payload = json.dumps({"s": "x" * 60_000}).encode()
            publisher.send(Publish("h", payload, 1, packet_id=1))
            sentinel.send(PingReq())
            assert await publisher.next() == PubAck(1)
            assert isinstance(await sentinel.next(), PingResp)
            delivered = await plain.next()
            assert isinstance(delivered, Publish) and delivered.payload == payload
            # 64 filters of 127 LIKE scans over 60 KB each: far more than the 5 ms budget.
            values = await sys.refresh()
            assert int(values["filters/skipped"]) > 0, values

    asyncio.run(main())
