"""Readers pause while too much waits behind a running commit, and resume after it.

In process: a real broker on a loopback port with a SQLite store whose commits can be held,
and a plain socket client, so the test can hold the writer while a publisher floods it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from telemq.broker import BrokerConfig, ListenerConfig
from telemq.broker.core import committer as committer_module
from telemq.broker.server import Broker
from telemq.protocol import Connect, Publish, encode

from .helpers import HeldStore

BACKLOG = 200
FLOOD = 1000
PAYLOAD = b"x" * 1000  # a flood of about 1 MB: it takes the broker several reads


async def until(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_a_flood_behind_a_held_commit_pauses_the_publisher_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(committer_module, "MAX_BACKLOG", BACKLOG)
    store = HeldStore(tmp_path / "telemq.db")
    config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0

    async def main() -> None:
        broker = Broker(config, store=store)
        await broker.start()
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.bound_ports[0])
            writer.write(encode(Connect("flooder")))
            assert (await reader.readexactly(4))[0] == 0x20  # CONNACK
            store.release.clear()
            # A QoS 1 publication starts a commit, which the store holds.
            writer.write(encode(Publish("t/1", b"q1", 1, packet_id=1)))
            await until(store.holding.is_set)
            flood = b"".join(encode(Publish("t/0", PAYLOAD)) for _ in range(FLOOD))
            writer.write(flood)
            (client,) = broker.clients
            assert client.transport is not None
            await until(lambda: not client.transport.is_reading())  # type: ignore[union-attr]
            waiting = len(broker.committer.pending)
            assert BACKLOG <= waiting < FLOOD  # paused part-way through the flood
            await asyncio.sleep(0.2)
            assert len(broker.committer.pending) == waiting  # and it stays paused
            store.release.set()
            await until(lambda: store.stats().journal_rows == FLOOD + 1)
            assert client.transport.is_reading()
            assert (await reader.readexactly(4)) == b"\x40\x02\x00\x01"  # the PUBACK
        finally:
            if writer is not None:
                writer.close()
            store.release.set()
            await broker.stop()

    asyncio.run(asyncio.wait_for(main(), 60))
