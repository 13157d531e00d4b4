"""A journal range streams with back-pressure: a client that does not read holds the broker's
reads of its range back (docs/pipeline.md, "The journal service").

The journal service in this process (`broker.http.HttpServer` on its own event loop), over a
200 MB journal written by the store; a raw socket asks for all of it and reads nothing. The
batches the broker has read from the store are counted (`journal.arrow.read_range`, wrapped):
while the client does not read, the broker stops after the first batches instead of reading
the range into memory; once the client reads, every row arrives, in order.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from telemq.broker.edges.http import HttpAuth, HttpServer
from telemq.broker.settings.config import HttpConfig
from telemq.journal import arrow
from telemq.store import JournalRecord, MemoryStore, SqliteStore, WriteBatch
from testsupport.process import wait_until

pytestmark = pytest.mark.timeout(120)

ROWS = 20_000
PAYLOAD = 10_000  # bytes: 200 MB in all, about 7 batches of 32 MB


def _journal(data: Path) -> None:
    data.mkdir()
    store = SqliteStore(data / "telemq.db", "off")
    store.load()
    batch = WriteBatch()
    for seq in range(1, ROWS + 1):
        payload = seq.to_bytes(4, "big") * (PAYLOAD // 4)
        batch.append_journal(JournalRecord(seq, seq, "big/t", "", 1, False, payload, "c", ""))
    store.commit(batch)
    store.close()


class _Served:
    """The journal service on an event loop in a thread of this process."""

    def __init__(self, data: Path) -> None:
        self.port = 0  # the system picks it as the server binds: known after __enter__
        allow = HttpAuth(lambda user, password: True, lambda user, topic: True, lambda user: False)
        self.server = HttpServer(
            [HttpConfig(host="127.0.0.1", port=0)], allow, MemoryStore(), None, str(data)
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> _Served:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)
        self.port = self.server.ports[0]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def test_a_client_that_does_not_read_holds_the_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa  # type: ignore[import-untyped]

    _journal(tmp_path / "data")
    read: list[int] = []
    original = arrow.read_range

    def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for batch in original(*args, **kwargs):
            read.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(arrow, "read_range", counted)
    with (
        _Served(tmp_path / "data") as served,
        socket.create_connection(("127.0.0.1", served.port)) as sock,
    ):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        sock.sendall(f"GET /journal/v1/range?from=1&to={ROWS} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert wait_until(lambda: len(read) >= 1, 30.0)
        # Give the broker every chance to run ahead; it must stop at what fits in the buffers.
        wait_until(lambda: len(read) >= 4, 3.0)
        held = sum(read)
        assert len(read) <= 3 and held < ROWS // 2, read
        sock.settimeout(60)
        received = bytearray()
        while chunk := sock.recv(1 << 20):
            received += chunk
            if received.endswith(b"0\r\n\r\n"):  # the end of the chunked body
                break
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert b"200 OK" in head.split(b"\r\n")[0] and b"chunked" in head.lower()
    stream = bytearray()
    while body:  # undo the chunked transfer encoding
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        stream += rest[:size]
        body = rest[size + 2 :]
    table = pa.ipc.open_stream(bytes(stream)).read_all()
    assert table.column("seq").to_pylist() == list(range(1, ROWS + 1))
    assert sum(read) == ROWS
