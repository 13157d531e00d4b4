"""What the broker stores for a QoS 2 PUBLISH it holds until PUBREL: one `IncomingRow`,
made from its own message (no `StoredMessage`, no `IncomingRecord`), which every store
loads back as the record the broker used to write: the message's every field, its MQTT 5.0
properties and expiry. End to end, a held message whose PUBREL comes only after a restart
is delivered once, as it was published.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from telemq.broker.core.message import Message
from telemq.protocol import Publish
from telemq.protocol.packets import PubComp, PubRec, PubRel
from telemq.store import (
    IncomingRecord,
    Op,
    SqliteStore,
    Store,
    SyncMode,
    WriteBatch,
)

from .test_17_qos2_release import Peer, journal_payloads, serving


def message(**fields: object) -> Message:
    held = Message("a/b", b"held\x00", 2, False, "sp", 'pub-\u00e9"1', "user\\1", 1_234)
    for name, value in fields.items():
        setattr(held, name, value)
    return held


def held_after_commit(store: Store, held: Message, packet_id: int) -> IncomingRecord:
    batch = WriteBatch()
    batch.put_incoming_row(held.incoming_row("pub", packet_id))
    assert [op for op, _ in batch.ops] == [Op.PUT_INCOMING_ROW]
    store.commit(batch)
    [record] = store.load().incoming
    return record


def test_a_plain_held_message(store_of_each_kind: Store) -> None:
    store = store_of_each_kind
    held = message()
    assert held_after_commit(store, held, 7) == IncomingRecord("pub", 7, held.to_stored())


def test_everything_a_held_message_can_carry(store_of_each_kind: Store) -> None:
    store = store_of_each_kind
    held = message(
        retain=True,
        store_id=41,
        properties=b"\x03\x00\x0atext/plain",
        expiry_at=1_900_000_000.25,
    )
    record = held_after_commit(store, held, 65535)
    assert record == IncomingRecord("pub", 65535, held.to_stored())
    assert record.message.expiry_at == 1_900_000_000.25
    assert store.load().next_message_id == 42  # its id raises the mark, as a record's did


def test_rows_and_records_of_one_key_replace_each_other_in_batch_order(
    store_of_each_kind: Store,
) -> None:
    store = store_of_each_kind
    first, second = message(payload=b"first"), message(payload=b"second")
    batch = WriteBatch()
    batch.put_incoming_row(first.incoming_row("pub", 1))
    batch.put_incoming(IncomingRecord("pub", 1, second.to_stored()))
    batch.put_incoming_row(first.incoming_row("pub", 2))
    batch.release_incoming("pub", 2)
    store.commit(batch)
    assert store.load().incoming == [
        IncomingRecord("pub", 1, second.to_stored()),
        IncomingRecord("pub", 2, first.to_stored(), released=True),
    ]


def test_releases_and_deletes_of_many_clients_in_one_batch(store_of_each_kind: Store) -> None:
    """Runs of releases and deletes, interleaving clients and long enough to be written a
    few statements per client (SQLite: `packet_id IN (...)`, 32 ids exact, then powers of
    two), change exactly the rows they name."""
    store = store_of_each_kind
    held = message()
    batch = WriteBatch()
    for packet_id in range(1, 101):
        for client_id in ("a", "b"):
            batch.put_incoming_row(held.incoming_row(client_id, packet_id))
    store.commit(batch)
    batch = WriteBatch()
    for packet_id in range(1, 71):  # a: 70 ids (64 + 4 + 2), b: 35 (32 + 2 + 1)
        batch.delete_incoming("a", packet_id)
        if packet_id % 2:
            batch.delete_incoming("b", packet_id)
    batch.delete_incoming("c", 1)  # nothing held: nothing to delete
    for packet_id in range(71, 101, 3):
        batch.release_incoming("a", packet_id)
        batch.release_incoming("b", packet_id)
    store.commit(batch)
    left = {(r.client_id, r.message.id, r.packet_id): r.released for r in store.load().incoming}
    assert {(c, p) for c, _, p in left} == {("a", p) for p in range(71, 101)} | {
        ("b", p) for p in range(1, 101) if p > 70 or p % 2 == 0
    }
    released = {(c, p) for (c, _, p), done in left.items() if done}
    assert released == {(c, p) for p in range(71, 101, 3) for c in ("a", "b")}


def test_a_held_message_released_after_a_restart_is_delivered_once(tmp_path: Path) -> None:
    """PUBLISH, PUBREC, then what a SIGKILL leaves (a copy of the store); on the restarted
    broker the same publisher's PUBREL releases the held message to a persistent
    subscriber, with its payload and RETAIN as published."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    live.mkdir()
    store = SqliteStore(live / "telemq.db", SyncMode.NORMAL)

    async def before_the_kill() -> None:
        async with serving(store) as (broker, peers):
            port = broker.bound_ports[0]
            subscriber = await Peer.connect(port, "held-sub", clean=False)
            publisher = await Peer.connect(port, "held-pub", clean=False)
            peers += [subscriber, publisher]
            await subscriber.subscribe("t/#")
            subscriber.close()
            publisher.send(Publish("t/held", b"\x00once\xff", 2, packet_id=9))
            assert await publisher.next() == PubRec(9)  # stored before PUBREC
            shutil.copytree(live, crashed)

    async def after_the_kill() -> None:
        restarted = SqliteStore(crashed / "telemq.db", SyncMode.NORMAL)
        [held] = restarted.load().incoming
        assert (held.client_id, held.packet_id, held.message.payload) == (
            "held-pub",
            9,
            b"\x00once\xff",
        )
        async with serving(restarted) as (broker, peers):
            port = broker.bound_ports[0]
            publisher = await Peer.connect(port, "held-pub", clean=False)
            peers.append(publisher)
            publisher.send(PubRel(9))
            assert await publisher.next() == PubComp(9)
            subscriber = await Peer.connect(port, "held-sub", clean=False)
            peers.append(subscriber)
            delivered = await subscriber.receive_qos2()
            assert (delivered.topic, delivered.payload, delivered.retain) == (
                "t/held",
                b"\x00once\xff",
                False,
            )
            assert await subscriber.nothing_for(0.3)
            assert journal_payloads(restarted) == [b"\x00once\xff"]

    asyncio.run(asyncio.wait_for(before_the_kill(), 60))
    store.close()
    asyncio.run(asyncio.wait_for(after_the_kill(), 60))
