"""Listeners: where connections come from.

Theory of operation
-------------------
A `Listener` accepts connections and gives each one a transport and a fresh protocol object
from the factory the broker hands it (a `Client` bound to the listener's `ListenerConfig`,
which carries its subscription point and certificate rules). Everything after that, the
broker does through the transport's small asyncio surface: `write`, `close`, `is_closing`,
`pause_reading` / `resume_reading` (back-pressure: reading pauses while the store catches up,
or while a password is checked) and `get_extra_info("peername")`. Any transport with that
surface plugs in: TCP and TLS (`TcpListener`), in-memory pipes for tests and embedding
(`MemoryListener`), WebSockets later.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any, cast

from ..settings.config import ListenerConfig
from ..settings.tls import server_context

log = logging.getLogger("telemq.broker")

ProtocolFactory = Callable[[], asyncio.Protocol]


class Listener:
    """Base of every listener: `config` says what its connections are."""

    def __init__(self, config: ListenerConfig) -> None:
        self.config = config
        self.ports: list[int] = []  # bound ports, once started (none for in-memory ones)

    async def start(self, factory: ProtocolFactory) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop accepting connections (open ones are the broker's to close)."""

    async def wait_closed(self) -> None:
        """Wait until `close` took effect."""


class TcpListener(Listener):
    """TCP, with TLS when the listener configuration has a certificate."""

    def __init__(self, config: ListenerConfig, where: str, connect_timeout: float) -> None:
        super().__init__(config)
        self._where = where  # names the listener in configuration errors
        self._connect_timeout = connect_timeout
        self._server: asyncio.Server | None = None

    async def start(self, factory: ProtocolFactory) -> None:
        config = self.config
        tls = server_context(config, self._where)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            factory,
            config.host,
            config.port,
            reuse_address=True,
            backlog=4096,
            ssl=tls,
            # A peer that never completes the handshake is dropped like one that never sends
            # CONNECT.
            ssl_handshake_timeout=self._connect_timeout if tls else None,
        )
        # uvloop returns a list where asyncio's stubs say tuple, and the compiled build checks
        # the declared type: read the attribute untyped.
        sockets: Sequence[socket.socket] = cast(Any, self._server).sockets
        for sock in sockets:
            host, port = sock.getsockname()[:2]
            self.ports.append(port)
            log.info(
                "listening on %s:%s (MQTT%s, sub point %r)",
                host,
                port,
                " over TLS" if tls is not None else "",
                config.sub_point,
            )

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def wait_closed(self) -> None:
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except Exception:  # a client that never goes away must not hold up the stop
                log.debug("listener on port %s: close timed out", self.config.port)


class MemoryListener(Listener):
    """Connections inside the process, without sockets: `await listener.connect()` gives a
    `MemoryConnection` to write MQTT bytes to and read the broker's from."""

    def __init__(self, config: ListenerConfig | None = None) -> None:
        super().__init__(config or ListenerConfig(host="memory", port=0))
        self._factory: ProtocolFactory | None = None
        self._count = 0

    async def start(self, factory: ProtocolFactory) -> None:
        self._factory = factory

    def close(self) -> None:
        self._factory = None

    async def connect(self) -> MemoryConnection:
        if self._factory is None:
            raise ConnectionRefusedError("the in-memory listener is not started")
        self._count += 1
        connection = MemoryConnection(self._factory(), f"memory:{self._count}")
        await asyncio.sleep(0)  # connection_made runs on the next iteration, as for TCP
        return connection


class MemoryConnection:
    """The client's end of an in-memory connection (see `MemoryListener`)."""

    def __init__(self, protocol: asyncio.Protocol, peer: str) -> None:
        self._loop = asyncio.get_running_loop()
        self.reader = asyncio.StreamReader()
        self._transport = _MemoryTransport(self, protocol, peer)
        self._loop.call_soon(protocol.connection_made, self._transport)

    def write(self, data: bytes) -> None:
        """Bytes to the broker, as if they arrived on a socket (on a later loop iteration)."""
        self._loop.call_soon(self._transport.feed, bytes(data))

    async def read(self, n: int = 65536) -> bytes:
        return await self.reader.read(n)

    async def readexactly(self, n: int) -> bytes:
        return await self.reader.readexactly(n)

    def close(self) -> None:
        """The client goes away (as a closed socket)."""
        self._loop.call_soon(self._transport.lost, None)

    @property
    def closed_by_broker(self) -> bool:
        return self._transport.is_closing()


class _MemoryTransport(asyncio.Transport):
    """The broker's end of an in-memory connection: the transport surface listeners give."""

    def __init__(self, peer: MemoryConnection, protocol: asyncio.Protocol, name: str) -> None:
        super().__init__({"peername": (name, 0)})
        self._peer = peer
        self._protocol = protocol
        self._closing = False
        self._lost = False
        self._paused = False
        self._inbox: list[bytes] = []  # bytes that came while reading was paused

    # -- what the broker calls ------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._peer.reader.feed_data(bytes(data))

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._peer.reader.feed_eof()
        asyncio.get_running_loop().call_soon(self.lost, None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        inbox, self._inbox = self._inbox, []
        for data in inbox:
            self.feed(data)

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def get_write_buffer_size(self) -> int:
        return 0

    # -- what the client's end calls --------------------------------------------

    def feed(self, data: bytes) -> None:
        if self._closing:
            return
        if self._paused:
            self._inbox.append(data)
        else:
            self._protocol.data_received(data)

    def lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        if not self._closing:
            self._closing = True
            self._peer.reader.feed_eof()
        self._protocol.connection_lost(exc)
