"""The latency floor of a Python broker (not a test, not part of telemq).

``python bench/latency_floor.py --port PORT [--durable none|thread|inline|handoff]``

A minimal MQTT 3.1.1 forwarder on asyncio (uvloop when installed), written to find out how
much of telemq's latency at a low message rate is telemq's own work and how much any
Python broker on the same machine pays anyway: the event loop's wake-up, one `read`, one
`write` per subscriber, and for durable QoS 1 the commit before PUBACK. It answers CONNECT,
SUBSCRIBE (`+` and `#` filters), PINGREQ and DISCONNECT, forwards each PUBLISH to the
matching subscribers at min(publish QoS, granted QoS) and acknowledges QoS 1 publications.
Nothing else: no sessions, retained messages, wills, keep-alive checks, QoS 2, re-sends or
limits. It imports nothing from telemq.

`--durable` decides when a QoS 1 PUBACK is sent:

- ``none``: at once, from memory (what Mosquitto does);
- ``thread``: after a row per publication is committed to SQLite (WAL, ``synchronous=FULL``,
  so one ``fdatasync`` per commit) on a writer thread, batching what arrives meanwhile:
  what telemq's default store does (docs/architecture.md);
- ``inline``: after the same commit run on the event loop itself (the next message waits
  behind the ``fdatasync``);
- ``handoff``: after a round trip to the writer thread that writes nothing: what handing the
  commit to another thread costs by itself, without SQLite or the disk.

Measure it with the yardstick (docs/performance.md, "How to reproduce") next to telemq, e.g.
``./bench.sh 'telemq=...' 'floor=python3 bench/latency_floor.py --port {port}'
'floor-durable=python3 bench/latency_floor.py --port {port} --durable thread'
--scenarios lat_q0_1k,lat_q1_1k``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import cast

CONNECT, PUBLISH, PUBACK, SUBSCRIBE, PINGREQ, DISCONNECT = 1, 3, 4, 8, 12, 14
CONNACK_ACCEPTED = b"\x20\x02\x00\x00"
PINGRESP = b"\xd0\x00"


def remaining_length(size: int) -> bytes:
    out = bytearray()
    while True:
        byte, size = size % 128, size // 128
        out.append(byte | 0x80 if size else byte)
        if not size:
            return bytes(out)


def filter_matches(topic_filter: list[str], topic: list[str]) -> bool:
    for index, level in enumerate(topic_filter):
        if level == "#":
            return True
        if index >= len(topic) or (level != "+" and level != topic[index]):
            return False
    return len(topic_filter) == len(topic)


class Subscriber:
    __slots__ = ("next_id", "peer", "qos")

    def __init__(self, peer: Peer, qos: int) -> None:
        self.peer = peer
        self.qos = qos
        self.next_id = 0


class Forwarder:
    """Subscriptions, and the durable log of QoS 1 publications when asked for."""

    def __init__(self, durable: str, directory: str) -> None:
        self.durable = durable
        self.subscriptions: list[tuple[list[str], Subscriber]] = []
        self.routes: dict[bytes, list[Subscriber]] = {}  # topic -> subscribers, cached
        self.database: sqlite3.Connection | None = None
        self.writer: ThreadPoolExecutor | None = None
        self.pending: list[tuple[list[bytes], Callable[[], None]]] = []
        self.committing = False
        if durable in ("thread", "inline"):
            path = os.path.join(directory, "floor.db")
            self.database = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self.database.execute("PRAGMA journal_mode=WAL")
            self.database.execute("PRAGMA synchronous=FULL")
            self.database.execute("CREATE TABLE IF NOT EXISTS log (payload BLOB)")
        if durable in ("thread", "handoff"):
            self.writer = ThreadPoolExecutor(1, thread_name_prefix="floor-writer")

    def subscribe(self, peer: Peer, topic_filter: str, qos: int) -> None:
        self.subscriptions.append((topic_filter.split("/"), Subscriber(peer, qos)))
        self.routes.clear()

    def forget(self, peer: Peer) -> None:
        self.subscriptions = [(f, s) for f, s in self.subscriptions if s.peer is not peer]
        self.routes.clear()

    def route(self, topic: bytes) -> list[Subscriber]:
        subscribers = self.routes.get(topic)
        if subscribers is None:
            levels = topic.decode("utf-8", "replace").split("/")
            subscribers = [s for f, s in self.subscriptions if filter_matches(f, levels)]
            self.routes[topic] = subscribers
        return subscribers

    def after_commit(self, rows: list[bytes], acknowledge: Callable[[], None]) -> None:
        """Log the publications `rows`, then `acknowledge` once they are durable."""
        if self.durable == "none":
            acknowledge()
            return
        self.pending.append((rows, acknowledge))
        if self.durable == "inline":
            batch, self.pending = self.pending, []
            self._commit([row for rows, _ in batch for row in rows])
            for _, action in batch:
                action()
        elif not self.committing:
            self._submit()

    def _commit(self, payloads: list[bytes]) -> None:
        if self.database is None:
            return  # --durable handoff: the round trip alone
        self.database.execute("BEGIN")
        self.database.executemany("INSERT INTO log VALUES (?)", [(p,) for p in payloads])
        self.database.execute("COMMIT")

    def _submit(self) -> None:
        assert self.writer is not None
        batch, self.pending = self.pending, []
        self.committing = True
        loop = asyncio.get_running_loop()
        future = self.writer.submit(self._commit, [row for rows, _ in batch for row in rows])

        def done(finished: Future[None]) -> None:
            loop.call_soon_threadsafe(self._committed, finished, batch)

        future.add_done_callback(done)

    def _committed(
        self, finished: Future[None], batch: list[tuple[list[bytes], Callable[[], None]]]
    ) -> None:
        self.committing = False
        finished.result()  # a failed commit ends the benchmark: nothing may be acknowledged
        if self.pending:
            self._submit()
        for _, action in batch:
            action()


class Peer(asyncio.Protocol):
    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder
        self.transport: asyncio.Transport | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.forwarder.forget(self)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        position, size = 0, len(buffer)
        acks: list[bytes] = []
        rows: list[bytes] = []
        while size - position >= 2:
            header, length, multiplier, index = buffer[position], 0, 1, position + 1
            while index < size:
                byte = buffer[index]
                length += (byte & 0x7F) * multiplier
                multiplier *= 128
                index += 1
                if byte < 0x80:
                    break
            else:
                break  # the length is not complete yet
            end = index + length
            if end > size:
                break
            self.handle(header, buffer[index:end], acks, rows)
            position = end
        self.buffer = buffer[position:]
        if acks:
            response = b"".join(acks)
            self.forwarder.after_commit(rows, lambda: self.write(response))

    def handle(self, header: int, body: bytes, acks: list[bytes], rows: list[bytes]) -> None:
        kind = header >> 4
        if kind == PUBLISH:
            self.publish(header, body, acks, rows)
        elif kind == CONNECT:
            self.write(CONNACK_ACCEPTED)
        elif kind == SUBSCRIBE:
            packet_id, granted, position = body[:2], bytearray(), 2
            while position < len(body):
                length = int.from_bytes(body[position : position + 2], "big")
                topic_filter = body[position + 2 : position + 2 + length].decode()
                qos = min(body[position + 2 + length], 1)
                self.forwarder.subscribe(self, topic_filter, qos)
                granted.append(qos)
                position += 3 + length
            self.write(bytes([0x90]) + remaining_length(2 + len(granted)) + packet_id + granted)
        elif kind == PINGREQ:
            self.write(PINGRESP)
        elif kind == DISCONNECT and self.transport is not None:
            self.transport.close()
        elif kind != PUBACK:
            print(f"latency_floor: packet type {kind} is not supported", file=sys.stderr)
            if self.transport is not None:
                self.transport.close()

    def publish(self, header: int, body: bytes, acks: list[bytes], rows: list[bytes]) -> None:
        qos = (header >> 1) & 3
        if qos == 2:
            print("latency_floor: QoS 2 is not supported", file=sys.stderr)
            if self.transport is not None:
                self.transport.close()
            return
        topic_length = int.from_bytes(body[:2], "big")
        topic_end = 2 + topic_length
        topic = body[2:topic_end]
        payload = body[topic_end + 2 :] if qos else body[topic_end:]
        for subscriber in self.forwarder.route(topic):
            if qos and subscriber.qos:
                subscriber.next_id = subscriber.next_id % 65535 + 1
                rest = body[:topic_end] + subscriber.next_id.to_bytes(2, "big") + payload
                subscriber.peer.write(b"\x32" + remaining_length(len(rest)) + rest)
            else:
                rest = body[:topic_end] + payload
                subscriber.peer.write(b"\x30" + remaining_length(len(rest)) + rest)
        if qos:
            acks.append(b"\x40\x02" + body[topic_end : topic_end + 2])
            rows.append(body)


async def serve(port: int, durable: str, directory: str) -> None:
    forwarder = Forwarder(durable, directory)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):  # stopped by its PID: clean up the store
        loop.add_signal_handler(signum, stop.set)
    server = await loop.create_server(lambda: Peer(forwarder), "127.0.0.1", port)
    async with server:
        await stop.wait()
    if forwarder.writer is not None:
        forwarder.writer.shutdown()
    if forwarder.database is not None:
        forwarder.database.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument(
        "--durable", choices=("none", "thread", "inline", "handoff"), default="none"
    )
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        runner: Callable[..., object] = asyncio.run
    else:
        runner = uvloop.run
    with tempfile.TemporaryDirectory(prefix="latency-floor-") as directory:
        runner(serve(args.port, args.durable, directory))


if __name__ == "__main__":
    main()
