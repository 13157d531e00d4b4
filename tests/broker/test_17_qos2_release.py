"""A QoS 2 release waits for its commit only where a crash could make it count twice.

In process: a real broker on a loopback port with a SQLite store whose commits can be held,
and plain socket clients. While the commit of a release is held:

- a clean publisher gets its PUBCOMP and a clean subscriber the message (their sessions end
  with a crash, and the stored message is released again at restart);
- a persistent subscriber gets nothing, and a persistent publisher no PUBCOMP, until the
  commit ends.

A copy of the store taken while the release is held is what a SIGKILL would leave: started
on it, a broker releases the message again, and the journal and the persistent subscriber
get it exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from telemq.broker import BrokerConfig, ListenerConfig
from telemq.broker.server import Broker
from telemq.protocol import Connect, Publish, Subscribe, encode
from telemq.protocol.codec import Decoder
from telemq.protocol.packets import ConnAck, Packet, PubComp, PubRec, PubRel, SubAck
from telemq.store import SqliteStore, SyncMode

from .helpers import HeldStore


class Peer:
    """A socket client speaking raw MQTT packets."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = Decoder()
        self.received: list[Packet] = []

    @classmethod
    async def connect(cls, port: int, client_id: str, clean: bool = True) -> Peer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        peer = cls(reader, writer)
        peer.send(Connect(client_id, clean_session=clean))
        assert isinstance(await peer.next(), ConnAck)
        return peer

    def send(self, packet: Connect | Publish | Subscribe | PubRel | PubComp | PubRec) -> None:
        self.writer.write(encode(packet))

    async def next(self, timeout: float = 5.0) -> Packet:
        while not self.received:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            assert data, "connection closed"
            self.received += self.decoder.feed(data)
        return self.received.pop(0)

    async def nothing_for(self, seconds: float) -> bool:
        try:
            await self.next(seconds)
        except TimeoutError:
            return True
        return False

    async def subscribe(self, topic: str) -> None:
        self.send(Subscribe(1, [(topic, 2)]))
        assert isinstance(await self.next(), SubAck)

    async def receive_qos2(self, timeout: float = 5.0) -> Publish:
        """The next PUBLISH, completing the QoS 2 flow as a subscriber."""
        packet = await self.next(timeout)
        assert isinstance(packet, Publish) and packet.qos == 2, packet
        self.send(PubRec(packet.packet_id))
        assert isinstance(await self.next(), PubRel)
        self.send(PubComp(packet.packet_id))
        return packet

    def close(self) -> None:
        self.writer.close()


@contextlib.asynccontextmanager
async def serving(store: SqliteStore) -> AsyncIterator[tuple[Broker, list[Peer]]]:
    """A broker on `store`, and a list whose peers are closed at the end."""
    config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0
    broker = Broker(config, store=store)
    await broker.start()
    peers: list[Peer] = []
    try:
        yield broker, peers
        await broker.committer.drain()
    finally:
        for peer in peers:
            peer.close()
        if isinstance(store, HeldStore):
            store.release.set()
        await broker.stop()


def journal_payloads(store: SqliteStore) -> list[bytes]:
    return [record.payload for record in store.read_journal(1, 1 << 62)]


def test_a_clean_release_is_not_held_up_by_its_commit_and_survives_a_crash(
    tmp_path: Path,
) -> None:
    live = tmp_path / "live"
    crashed = tmp_path / "crashed"
    live.mkdir()
    store = HeldStore(live / "telemq.db")

    async def before_the_crash() -> None:
        async with serving(store) as (broker, peers):
            port = broker.bound_ports[0]
            durable = await Peer.connect(port, "durable-sub", clean=False)
            clean = await Peer.connect(port, "clean-sub")
            publisher = await Peer.connect(port, "clean-pub")
            peers += [durable, clean, publisher]
            await durable.subscribe("t/#")
            await clean.subscribe("t/#")
            publisher.send(Publish("t/1", b"once", 2, packet_id=1))
            assert await publisher.next() == PubRec(1)  # the message is stored
            store.release.clear()
            publisher.send(PubRel(1))
            assert await publisher.next() == PubComp(1)
            assert (await clean.receive_qos2()).payload == b"once"
            await asyncio.get_running_loop().run_in_executor(None, store.holding.wait, 5)
            assert await durable.nothing_for(0.2)  # not before the release is durable
            # What a SIGKILL would leave: the store without the release.
            shutil.copytree(live, crashed)
            store.release.set()
            assert (await durable.receive_qos2()).payload == b"once"
            assert journal_payloads(store) == [b"once"]

    async def after_the_crash() -> None:
        restarted = SqliteStore(crashed / "telemq.db", SyncMode.NORMAL)
        async with serving(restarted) as (broker, peers):
            # Released again at start-up: journaled once, queued for the durable session.
            await broker.committer.drain()
            assert journal_payloads(restarted) == [b"once"]
            durable = await Peer.connect(broker.bound_ports[0], "durable-sub", clean=False)
            peers.append(durable)
            assert (await durable.receive_qos2()).payload == b"once"
            assert await durable.nothing_for(0.3)
        reopened = SqliteStore(crashed / "telemq.db", SyncMode.NORMAL)
        assert journal_payloads(reopened) == [b"once"]
        reopened.close()

    asyncio.run(asyncio.wait_for(before_the_crash(), 60))
    asyncio.run(asyncio.wait_for(after_the_crash(), 60))


def test_a_persistent_publisher_gets_pubcomp_only_once_the_release_is_durable(
    tmp_path: Path,
) -> None:
    store = HeldStore(tmp_path / "telemq.db")

    async def main() -> None:
        async with serving(store) as (broker, peers):
            port = broker.bound_ports[0]
            subscriber = await Peer.connect(port, "clean-sub")
            publisher = await Peer.connect(port, "durable-pub", clean=False)
            peers += [subscriber, publisher]
            await subscriber.subscribe("t/#")
            publisher.send(Publish("t/1", b"held", 2, packet_id=9))
            assert await publisher.next() == PubRec(9)
            store.release.clear()
            publisher.send(PubRel(9))
            await asyncio.get_running_loop().run_in_executor(None, store.holding.wait, 5)
            # A persistent publisher that had its PUBCOMP would never re-send PUBREL: the
            # stored message would stay unreleased after a crash.
            assert await publisher.nothing_for(0.2)
            store.release.set()
            assert await publisher.next() == PubComp(9)
            assert (await subscriber.receive_qos2()).payload == b"held"

    asyncio.run(asyncio.wait_for(main(), 60))
