"""One client's flood does not hold the others: its reads are handled in slices (a read
budget of packets, and a large read ends its turn), and the store's back-pressure pauses the
client whose writes fill the backlog, not everyone.

In process: a real broker on a loopback port and plain socket clients (asyncio streams, so
that what a client writes is in the broker's socket before the broker reads); the large-read
test uses in-memory connections, whose writes reach the broker as whole reads, two of them
in one turn of the loop as uvloop hands over full buffers. Nothing here measures time: the
order in which the broker accepted publications shows that another client went between the
slices of a flood, and the admin API's per-client counters (`reads_held`, `store_pauses`)
show whose reading was held or paused. `soak/hostile.py` measures what the bystander waits
(docs/security.md, "Floods from one client").
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from telemq.broker import BrokerConfig, Hook, ListenerConfig, MemoryListener
from telemq.broker.core import committer as committer_module
from telemq.broker.core.session import Client
from telemq.broker.operations.admin_views import client_json
from telemq.broker.server import Broker
from telemq.protocol import Connect, Publish, Subscribe, encode
from telemq.protocol.codec import Decoder
from telemq.protocol.packets import ConnAck, Packet, PubAck, SubAck
from testsupport.held_store import HeldStore

BACKLOG = 1000  # MAX_BACKLOG for the back-pressure test: 1/16 of it is a flooder's share
FLOOD = 2000  # publications in the flood: one write, one read of about 30 KB
LARGE = 100  # publications of 1 KiB in each of two reads of the large-read test


class Peer:
    """A plain MQTT 3.1.1 client on an asyncio stream: packets out, decoded packets in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = Decoder()
        self.pending: deque[Packet] = deque()

    @classmethod
    async def connect(cls, port: int, client_id: str) -> Peer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        peer = cls(reader, writer)
        peer.send(Connect(client_id))
        ack = await peer.next()
        assert isinstance(ack, ConnAck) and ack.return_code == 0, ack
        return peer

    def send(self, packet: Any) -> None:
        self.writer.write(encode(packet))

    async def next(self, timeout: float = 10.0) -> Packet:
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(1 << 16), timeout)
            if not data:
                raise ConnectionError("closed by the broker")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.popleft()

    async def subscribe(self, topic_filter: str, qos: int = 0) -> None:
        self.send(Subscribe(1, [(topic_filter, qos)]))
        while not isinstance(await self.next(), SubAck):
            pass

    def close(self) -> None:
        self.writer.close()


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def client_views(broker: Broker) -> dict[str, dict[str, Any]]:
    """What the admin API shows of each connected client (GET /api/v1/clients)."""
    return {c.client_id: client_json(c, broker.registry) for c in broker.clients}


def client_named(broker: Broker, client_id: str) -> Client:
    (client,) = [c for c in broker.clients if c.client_id == client_id]
    return client


def loopback_config() -> BrokerConfig:
    config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0
    return config


class AcceptedOrder(Hook):
    """The topics of accepted publications, in order; runs `on_first` at the flood's first."""

    def __init__(self) -> None:
        self.topics: list[str] = []
        self.on_first: Callable[[], None] | None = None

    def on_message_accepted(self, message: Any) -> None:
        self.topics.append(message.topic)
        if message.topic in ("flood/0", "big/0") and self.on_first is not None:
            self.on_first()


def test_another_client_goes_between_the_slices_of_a_flood_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    """The flood (one read of 2,000 publications) is handled a budget at a time, so the
    bystander's publication, which arrives while the flood's first one is being handled, is
    accepted before the flood's last; the subscriber gets all of the flood, in order."""
    order = AcceptedOrder()
    config = loopback_config()
    config.store.data_dir = str(tmp_path / "data")

    async def main() -> None:
        broker = Broker(config, hooks=[order])
        await broker.start()
        peers: list[Peer] = []
        try:
            port = broker.bound_ports[0]
            watcher = await Peer.connect(port, "watcher")
            peers.append(watcher)
            await watcher.subscribe("flood/#")
            bystander = await Peer.connect(port, "bystander")
            peers.append(bystander)
            await bystander.subscribe("by/#")
            flooder = await Peer.connect(port, "flooder")
            peers.append(flooder)
            # While the broker handles the flood's first publication, the bystander's lands
            # in its socket: it is read once the flood's slice ends, not after the flood.
            order.on_first = lambda: bystander.send(Publish("by/me", b"hello"))
            flood = [Publish(f"flood/{n}", b"x") for n in range(FLOOD)]
            flooder.writer.write(b"".join(encode(p) for p in flood))
            back = await bystander.next()
            assert isinstance(back, Publish) and back.topic == "by/me", back
            got = [await watcher.next() for _ in range(FLOOD)]
            assert [p.topic for p in got if isinstance(p, Publish)] == [p.topic for p in flood]
            flood_order = [t for t in order.topics if t.startswith("flood/")]
            assert flood_order == [p.topic for p in flood]
            mine = order.topics.index("by/me")
            last = order.topics.index(f"flood/{FLOOD - 1}")
            assert mine < last, "the bystander waited for the whole flood"
            views = client_views(broker)
            assert views["flooder"]["reads_held"] >= 1
            assert views["bystander"]["reads_held"] == 0
            assert broker.view.overview().values["reads_held"] >= 1
        finally:
            for peer in peers:
                peer.close()
            await broker.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_full_backlog_pauses_the_client_that_filled_it_and_not_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit held by the store, a flood behind it: the flooder's reading pauses, the
    bystander's round trips go on and its QoS 1 publication is acknowledged after the
    commit, and every publication of the flood is acknowledged and journaled."""
    monkeypatch.setattr(committer_module, "MAX_BACKLOG", BACKLOG)
    store = HeldStore(tmp_path / "telemq.db")

    async def main() -> None:
        broker = Broker(loopback_config(), store=store)
        await broker.start()
        peers: list[Peer] = []
        try:
            port = broker.bound_ports[0]
            bystander = await Peer.connect(port, "bystander")
            peers.append(bystander)
            await bystander.subscribe("by/#")
            flooder = await Peer.connect(port, "flooder")
            peers.append(flooder)
            store.release.clear()
            # A QoS 1 publication starts a commit, which the store holds.
            flooder.send(Publish("flood/start", b"q1", 1, packet_id=1))
            await until(store.holding.is_set)
            # QoS 0, every tenth QoS 1: far more than a flooder's share of the backlog.
            flood = [
                Publish(f"flood/{n}", b"x" * 100, 1 if n % 10 == 0 else 0, packet_id=n + 2)
                for n in range(FLOOD)
            ]
            flooder.writer.write(b"".join(encode(p) for p in flood))
            await until(lambda: len(broker.committer.pending) >= BACKLOG)
            await asyncio.sleep(0.2)
            waiting = len(broker.committer.pending)
            assert BACKLOG <= waiting < FLOOD  # paused part-way through the flood
            await asyncio.sleep(0.2)
            assert len(broker.committer.pending) == waiting  # and it stays paused
            transport = client_named(broker, "flooder").transport
            assert transport is not None and not transport.is_reading()
            # The commit is still held: the bystander's round trips go on regardless.
            for n in range(20):
                bystander.send(Publish(f"by/{n}", b"%d" % n))
                try:
                    back = await bystander.next(5.0)
                except TimeoutError:
                    pytest.fail(f"round trip {n}: the bystander was paused with the flooder")
                assert isinstance(back, Publish) and back.topic == f"by/{n}", back
            bystander.send(Publish("by/q1", b"one", 1, packet_id=7))
            back = await bystander.next(5.0)
            assert isinstance(back, Publish) and back.topic == "by/q1", back
            assert store.holding.is_set() and not store.release.is_set()
            views = client_views(broker)
            assert views["flooder"]["store_pauses"] >= 1
            assert views["bystander"]["store_pauses"] == 0
            assert len(broker.committer.pending) - waiting <= 21 + 1  # the bystander's rows
            store.release.set()
            acked: set[int] = set()
            wanted = {1} | {p.packet_id for p in flood if p.qos == 1}
            while acked != wanted:
                packet = await flooder.next(20.0)
                if isinstance(packet, PubAck):
                    acked.add(packet.packet_id)
            ack = await bystander.next(20.0)
            assert isinstance(ack, PubAck) and ack.packet_id == 7, ack
            await until(lambda: store.stats().journal_rows == 1 + FLOOD + 20 + 1)
            assert broker.view.overview().values["store_pauses"] >= 1
        finally:
            store.release.set()
            for peer in peers:
                peer.close()
            await broker.stop()

    asyncio.run(asyncio.wait_for(main(), 90))


def test_a_large_read_ends_the_clients_turn_though_it_holds_few_packets(tmp_path: Path) -> None:
    """Two reads of 100 publications of 1 KiB each, handed over in one turn of the loop (as
    uvloop hands over full buffers, up to 32 in a row): both are under the packet budget,
    but the first is over 64 KiB, so the second waits for a later turn and the bystander's
    publication, which came meanwhile, is accepted before it."""
    order = AcceptedOrder()
    listener = MemoryListener()
    config = BrokerConfig()
    config.sys.interval = 0
    config.store.data_dir = str(tmp_path / "data")

    async def main() -> None:
        broker = Broker(config, hooks=[order], listeners=[listener])
        await broker.start()
        try:
            received = broker.subscribe("big/#", qos=0)
            flooder = await listener.connect()
            bystander = await listener.connect()
            for connection, client_id in ((flooder, "flooder"), (bystander, "bystander")):
                connection.write(encode(Connect(client_id)))
                assert (await connection.readexactly(4))[:2] == b"\x20\x02"  # CONNACK
            order.on_first = lambda: bystander.write(encode(Publish("by/me", b"hello")))
            large = [Publish(f"big/{n}", b"x" * 1024) for n in range(2 * LARGE)]
            first = b"".join(encode(p) for p in large[:LARGE])
            assert len(first) >= 65536
            flooder.write(first)  # two reads in one turn, as a socket's full buffers
            flooder.write(b"".join(encode(p) for p in large[LARGE:]))
            got = [await asyncio.wait_for(received.get(), 10) for _ in large]
            assert [m.topic for m in got] == [p.topic for p in large]  # nothing lost
            await until(lambda: "by/me" in order.topics)
            mine = order.topics.index("by/me")
            assert (
                order.topics.index(f"big/{LARGE - 1}") < mine < order.topics.index(f"big/{LARGE}")
            ), "the second read was handled in the same turn as the first"
            views = client_views(broker)
            assert views["flooder"]["reads_held"] >= 1
            assert views["bystander"]["reads_held"] == 0
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(main(), 60))
