"""A QoS 2 message re-sent after its release is recognised, not delivered again.

The race the crash soak found (docs/reliability.md, "QoS 2 step by step"): a persistent
publisher sends PUBREL, the broker commits the release and is killed before the PUBCOMP
reaches the client. paho-mqtt then re-sends the PUBLISH itself, with DUP=0, instead of the
PUBREL, as soon as one reconnection attempt has failed (its `reconnect` resets the message
state at every attempt). The broker remembers released ids durably, with a digest of the
message, and takes such a PUBLISH on a later connection for the same message.

In process: real brokers on loopback ports and raw MQTT packets. The kill is injected at the
exact step: the store copies itself right after the commit that releases the message, which
is what a SIGKILL at that moment leaves; a broker started on the copy gets the re-send.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

from telemq.protocol import RELEASED_IDS_KEPT, Publish
from telemq.protocol.packets import PubComp, PubRec, PubRel
from telemq.store import SqliteStore, SyncMode, WriteBatch
from telemq.store.base import Op

from .test_17_qos2_release import Peer, journal_payloads, serving


class SnapshotAfterRelease(SqliteStore):
    """Copies its directory to `snapshot` right after the commit of a QoS 2 release: the
    store a SIGKILL between that commit and the PUBCOMP leaves behind."""

    def __init__(self, path: Path, snapshot: Path) -> None:
        super().__init__(path, SyncMode.NORMAL)
        self.snapshot = snapshot
        self.taken = False

    def commit(self, batch: WriteBatch) -> None:
        super().commit(batch)
        released = any(op is Op.RELEASE_INCOMING for op, _ in batch.ops)
        if released and not self.taken:
            self.taken = True
            shutil.copytree(self.path.parent, self.snapshot)


async def complete_qos2(publisher: Peer, packet_id: int, topic: str, payload: bytes) -> None:
    """PUBLISH (DUP=0, as paho re-sends it), PUBREC, PUBREL, PUBCOMP."""
    publisher.send(Publish(topic, payload, 2, packet_id=packet_id))
    assert await publisher.next() == PubRec(packet_id)
    publisher.send(PubRel(packet_id))
    assert await publisher.next() == PubComp(packet_id)


def held_rows(store: SqliteStore, client_id: str) -> list[tuple[int, int]]:
    with sqlite3.connect(store.path) as conn:
        rows = conn.execute(
            "SELECT packet_id, released FROM incoming WHERE client_id = ? ORDER BY packet_id",
            (client_id,),
        ).fetchall()
    conn.close()
    return [(int(packet_id), int(released)) for packet_id, released in rows]


def test_a_publish_resent_after_a_kill_that_followed_the_release_is_not_delivered_twice(
    tmp_path: Path,
) -> None:
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    live.mkdir()
    store = SnapshotAfterRelease(live / "telemq.db", crashed)

    async def before_the_kill() -> None:
        async with serving(store) as (broker, peers):
            port = broker.bound_ports[0]
            subscriber = await Peer.connect(port, "durable-sub", clean=False)
            publisher = await Peer.connect(port, "durable-pub", clean=False)
            peers += [subscriber, publisher]
            await subscriber.subscribe("t/#")
            await complete_qos2(publisher, 7, "t/1", b"once")
            assert store.taken

    async def after_the_kill() -> None:
        restarted = SqliteStore(crashed / "telemq.db", SyncMode.NORMAL)
        async with serving(restarted) as (broker, peers):
            port = broker.bound_ports[0]
            # The kill came before the PUBCOMP: paho re-sends the PUBLISH, DUP=0.
            publisher = await Peer.connect(port, "durable-pub", clean=False)
            peers.append(publisher)
            await complete_qos2(publisher, 7, "t/1", b"once")
            subscriber = await Peer.connect(port, "durable-sub", clean=False)
            peers.append(subscriber)
            assert (await subscriber.receive_qos2()).payload == b"once"
            assert await subscriber.nothing_for(0.3)
            await broker.committer.drain()
            assert journal_payloads(restarted) == [b"once"]
            assert held_rows(restarted, "durable-pub") == [(7, 1)]

    asyncio.run(asyncio.wait_for(before_the_kill(), 60))
    asyncio.run(asyncio.wait_for(after_the_kill(), 60))


def test_a_publish_resent_on_a_new_connection_after_a_lost_pubcomp_is_the_same_message(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "telemq.db", SyncMode.NORMAL)

    async def main() -> None:
        async with serving(store) as (broker, peers):
            port = broker.bound_ports[0]
            subscriber = await Peer.connect(port, "durable-sub", clean=False)
            peers.append(subscriber)
            await subscriber.subscribe("t/#")
            first = await Peer.connect(port, "durable-pub", clean=False)
            first.send(Publish("t/1", b"once", 2, packet_id=3))
            assert await first.next() == PubRec(3)
            first.send(PubRel(3))
            assert (await subscriber.receive_qos2()).payload == b"once"
            first.close()  # gone before reading its PUBCOMP
            again = await Peer.connect(port, "durable-pub", clean=False)
            peers.append(again)
            await complete_qos2(again, 3, "t/1", b"once")
            assert await subscriber.nothing_for(0.3)
            # Another message under the same id is a new one: it is delivered.
            await complete_qos2(again, 3, "t/1", b"twice")
            assert (await subscriber.receive_qos2()).payload == b"twice"
            await broker.committer.drain()
            assert journal_payloads(store) == [b"once", b"twice"]

    asyncio.run(asyncio.wait_for(main(), 60))


def test_the_same_message_under_a_completed_id_on_the_same_connection_is_a_new_one(
    tmp_path: Path,
) -> None:
    """MQTT-4.3.3-3: after PUBREL, a PUBLISH with that id is a new publication; only a
    re-send on a later connection can be the client's lost flow."""
    store = SqliteStore(tmp_path / "telemq.db", SyncMode.NORMAL)

    async def main() -> None:
        async with serving(store) as (broker, peers):
            port = broker.bound_ports[0]
            subscriber = await Peer.connect(port, "clean-sub")
            publisher = await Peer.connect(port, "durable-pub", clean=False)
            peers += [subscriber, publisher]
            await subscriber.subscribe("t/#")
            for _ in range(2):
                await complete_qos2(publisher, 1, "t/1", b"tick")
                assert (await subscriber.receive_qos2()).payload == b"tick"
            await broker.committer.drain()
            assert journal_payloads(store) == [b"tick", b"tick"]

    asyncio.run(asyncio.wait_for(main(), 60))


def test_released_ids_are_bounded_per_session_and_clean_sessions_keep_none(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "telemq.db", SyncMode.NORMAL)
    count = RELEASED_IDS_KEPT + 20

    async def main() -> None:
        async with serving(store) as (broker, peers):
            port = broker.bound_ports[0]
            durable = await Peer.connect(port, "durable-pub", clean=False)
            clean = await Peer.connect(port, "clean-pub")
            peers += [durable, clean]
            for packet_id in range(1, count + 1):
                await complete_qos2(durable, packet_id, "t/1", b"%d" % packet_id)
                await complete_qos2(clean, packet_id, "t/1", b"%d" % packet_id)
            await broker.committer.drain()
            remembered = list(range(count - RELEASED_IDS_KEPT + 1, count + 1))
            assert [pid for pid, _ in held_rows(store, "durable-pub")] == remembered
            assert held_rows(store, "clean-pub") == []
            assert list(broker.sessions["durable-pub"].released) == remembered

    asyncio.run(asyncio.wait_for(main(), 60))
    # After a restart the same ids are remembered, oldest first.
    reopened = SqliteStore(tmp_path / "telemq.db", SyncMode.NORMAL)

    async def restarted() -> None:
        async with serving(reopened) as (broker, _):
            released = broker.sessions["durable-pub"].released
            assert list(released) == list(range(count - RELEASED_IDS_KEPT + 1, count + 1))

    asyncio.run(asyncio.wait_for(restarted(), 60))
