"""A small read of QoS 2 packets is answered in two halves while commits are cheap.

In process: a real broker on a loopback port whose client transports record every write
(test_16's `record_writes`), and plain socket clients that send a whole window in one
write, as a client with a small window does. While commits cost no flush to disk (the
memory store here, or `sync = "normal"`), the first half of a read of QoS 2 PUBLISHes or
PUBRELs is committed and acknowledged before the second half is handled
(`Committer.answer_early`), so the client can work on those acknowledgements meanwhile.
A read of QoS 1 PUBLISHes, a read smaller or larger than a small window, and any read
while commits wait for the disk are answered after one commit, as before. Either way
every acknowledgement comes once, in order, and every QoS 2 message reaches the
subscriber exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from telemq.broker import BrokerConfig, ListenerConfig
from telemq.broker.core import committer as committer_module
from telemq.broker.server import Broker
from telemq.protocol import Connect, Publish, PubRel, Subscribe, encode
from telemq.store import MemoryStore, WriteBatch

from .test_16_write_order import record_writes

WINDOW = 10
PUBACK, PUBREC, PUBCOMP = 0x40, 0x50, 0x70


class SlowMemoryStore(MemoryStore):
    """Every commit takes twice the early-answer budget, as a store that flushes to disk."""

    def commit(self, batch: WriteBatch) -> None:
        time.sleep(2 * committer_module.EARLY_BUDGET)
        super().commit(batch)


def acks_per_write(
    writes: list[tuple[str, bytes]], kind: int, client_id: str = "pub"
) -> list[list[int]]:
    """The packet ids of the acknowledgements of `kind` written to `client_id`, grouped by
    the write that carried them (each acknowledgement is 4 bytes)."""
    groups = []
    for to, data in writes:
        ids = [
            int.from_bytes(data[i + 2 : i + 4], "big")
            for i in range(0, len(data), 4)
            if to == client_id and data[i] & 0xF0 == kind
        ]
        if ids:
            groups.append(ids)
    return groups


def with_broker(
    store: MemoryStore, body: Callable[[Broker, int], Awaitable[None]], journal: bool = True
) -> None:
    config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0
    config.journal.enabled = journal  # the journal's rows are what QoS 1 waits for

    async def main() -> None:
        broker = Broker(config, store=store)
        await broker.start()
        try:
            await body(broker, broker.bound_ports[0])
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(main(), 30))


async def connected(
    port: int, client_id: str, clean_session: bool = True
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode(Connect(client_id, clean_session=clean_session)))
    assert (await reader.readexactly(4))[0] == 0x20  # CONNACK
    return reader, writer


async def send_window(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, qos: int, ids: range
) -> list[int]:
    """Publications `ids` of `qos` in one write; the packet ids acknowledged, in order (a
    QoS 2 exchange then completed: PUBRELs, PUBCOMPs)."""
    writer.write(b"".join(encode(Publish("t", b"x", qos, packet_id=n)) for n in ids))
    acks = await reader.readexactly(4 * len(ids))
    assert {acks[i] for i in range(0, len(acks), 4)} == {PUBACK if qos == 1 else PUBREC}
    if qos == 2:
        writer.write(b"".join(encode(PubRel(n)) for n in ids))
        await reader.readexactly(4 * len(ids))
    return [int.from_bytes(acks[i + 2 : i + 4], "big") for i in range(0, len(acks), 4)]


def one_window(qos: int) -> list[tuple[str, bytes]]:
    """The broker's writes while a publisher sends a window of 10 at `qos` in one write."""
    writes: list[tuple[str, bytes]] = []

    async def body(broker: Broker, port: int) -> None:
        reader, writer = await connected(port, "pub")
        try:
            record_writes(broker, writes)
            assert await send_window(reader, writer, qos, range(1, 11)) == [*range(1, 11)]
        finally:
            writer.close()

    with_broker(MemoryStore(), body)
    return writes


def test_a_small_window_of_qos_2_is_acknowledged_in_two_halves_while_commits_are_cheap() -> None:
    assert acks_per_write(one_window(2), PUBREC) == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]


def test_a_small_window_of_qos_1_is_acknowledged_at_once() -> None:
    """Early PUBACKs would only bring the next PUBLISHes sooner, for a commit more."""
    assert acks_per_write(one_window(1), PUBACK) == [[*range(1, 11)]]


def test_a_read_is_acknowledged_at_once_when_commits_wait_for_the_disk() -> None:
    writes: list[tuple[str, bytes]] = []

    async def body(broker: Broker, port: int) -> None:
        reader, writer = await connected(port, "pub")
        try:
            # Single exchanges first: the committer learns what a commit costs.
            for n in range(1, 11):
                await send_window(reader, writer, 2, range(n, n + 1))
            record_writes(broker, writes)
            await send_window(reader, writer, 2, range(11, 21))
        finally:
            writer.close()

    with_broker(SlowMemoryStore(), body)
    assert acks_per_write(writes, PUBREC) == [[*range(11, 21)]]


def test_reads_smaller_or_larger_than_a_small_window_are_acknowledged_at_once() -> None:
    small = committer_module.EARLY_MIN_PACKETS - 1
    large = committer_module.EARLY_MAX_PACKETS + 1
    writes: list[tuple[str, bytes]] = []

    async def body(broker: Broker, port: int) -> None:
        reader, writer = await connected(port, "pub")
        try:
            record_writes(broker, writes)
            await send_window(reader, writer, 2, range(1, small + 1))
            await send_window(reader, writer, 2, range(1, large + 1))
        finally:
            writer.close()

    with_broker(MemoryStore(), body)
    assert acks_per_write(writes, PUBREC) == [[*range(1, small + 1)], [*range(1, large + 1)]]


def test_qos_2_answered_early_is_still_delivered_exactly_once_in_order() -> None:
    writes: list[tuple[str, bytes]] = []

    async def body(broker: Broker, port: int) -> None:
        sub_reader, sub_writer = await connected(port, "sub")
        # A persistent publisher: its PUBCOMPs wait for the releases' commit too (a clean
        # one's go at once: its held messages are released again at a restart).
        pub_reader, pub_writer = await connected(port, "pub", clean_session=False)
        try:
            sub_writer.write(encode(Subscribe(1, [("t/#", 2)])))
            assert (await sub_reader.readexactly(5))[0] == 0x90  # SUBACK
            record_writes(broker, writes)
            pub_writer.write(
                b"".join(encode(Publish(f"t/{n}", b"x", 2, packet_id=n)) for n in range(1, 11))
            )
            recs = await pub_reader.readexactly(4 * WINDOW)
            assert {recs[i] for i in range(0, 40, 4)} == {PUBREC}
            # Nothing is delivered before its PUBREL; then the PUBRELs, in one write too.
            pub_writer.write(b"".join(encode(PubRel(n)) for n in range(1, 11)))
            comps = await pub_reader.readexactly(4 * WINDOW)
            assert [int.from_bytes(comps[i + 2 : i + 4], "big") for i in range(0, 40, 4)] == [
                *range(1, 11)
            ]
            topics: list[str] = []
            while len(topics) < WINDOW:
                header = await sub_reader.readexactly(2)
                body_ = await sub_reader.readexactly(header[1])
                assert header[0] & 0xF6 == 0x34  # PUBLISH, QoS 2
                length = int.from_bytes(body_[:2], "big")
                topics.append(body_[2 : 2 + length].decode())
                packet_id = body_[2 + length : 4 + length]
                sub_writer.write(bytes([0x50, 2]) + packet_id)  # PUBREC
            assert topics == [f"t/{n}" for n in range(1, 11)]
            rels = await sub_reader.readexactly(4 * WINDOW)
            assert {rels[i] for i in range(0, 40, 4)} == {0x62}  # PUBREL: no PUBLISH again
            try:
                extra = await asyncio.wait_for(sub_reader.read(1), 0.3)
            except TimeoutError:
                extra = b""
            assert extra == b"", "a QoS 2 message delivered twice"
        finally:
            pub_writer.close()
            sub_writer.close()

    with_broker(MemoryStore(), body)
    assert acks_per_write(writes, PUBREC) == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    assert acks_per_write(writes, PUBCOMP) == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
