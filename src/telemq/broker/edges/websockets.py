"""MQTT over WebSockets on the HTTP listeners (`[[http]]`, docs/websockets.md).

Theory of operation
-------------------
Browsers and JavaScript clients reach brokers over WebSockets (MQTT 5.0 §6, MQTT 3.1.1 §6):
the client upgrades an HTTP request on one of the listener's `websocket_paths` (default
`/mqtt` and `/`), offering the subprotocol `mqtt` (`mqttv3.1` for MQTT 3.1), then sends its
MQTT bytes in binary WebSocket messages. A message may hold part of a packet or several
packets: the bytes go to the same `Client` and byte-stream `Connection` as a TCP client's,
so every protocol level, user, ACL and limit is the TCP listener's.

The messages aiohttp has already read are taken in one go and their bytes given to the
client in one call (`Inbound`), so a burst of one-PUBLISH messages costs what one TCP read
of the same bytes does. `WebSocketTransport` is the asyncio transport that `Client` writes
to: what the broker writes during one loop iteration (already coalesced by `Client.flush`)
goes out as one binary message, in order, from a writer task; more than `HIGH_WATER` bytes
waiting pauses the client's writing (`Client.pause_writing`) as a full socket would, until
the writer is down to `LOW_WATER`. The broker pausing the client's reading (the store is backlogged)
holds the handler before its next message, once what came before is delivered. `close()`
sends what is waiting, then the WebSocket close frame; the end of the WebSocket, from
either side, is the connection's end (`Client.connection_lost`).

A request that is not a WebSocket upgrade, or that offers subprotocols none of which is
MQTT's, gets 400 with a JSON message saying what was expected; text messages are refused
(close code 1003: MQTT travels in binary messages). HTTP authentication does not apply to
these paths: the MQTT CONNECT carries the credentials, as on TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from ..settings.config import ListenerConfig

log = logging.getLogger("telemq.broker")

SUBPROTOCOLS = ("mqtt", "mqttv3.1")
HIGH_WATER = 256 * 1024  # bytes waiting to be sent before the client's writing pauses
LOW_WATER = 64 * 1024  # ... and resumes
MIN_MESSAGE = 4 * 1024 * 1024  # the largest WebSocket message taken, at least

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ClientFactory = Callable[[ListenerConfig], asyncio.Protocol]


def mqtt_over_websocket(
    make_client: ClientFactory, listener: ListenerConfig, max_packet_size: int
) -> Handler:
    """The aiohttp handler of one HTTP listener's WebSocket paths; `make_client` makes the
    `Client` of a connection of `listener`."""
    max_message = max(MIN_MESSAGE, 2 * max_packet_size)

    async def serve(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(protocols=SUBPROTOCOLS, max_msg_size=max_message, compress=False)
        refusal = _refusal(request, ws)
        if refusal is not None:
            return web.json_response({"error": refusal}, status=400)
        await ws.prepare(request)
        transport = WebSocketTransport(ws, request)
        client = make_client(listener)
        transport.set_protocol(client)
        client.connection_made(transport)
        inbound = Inbound(client, transport)
        try:
            async for message in ws:
                if message.type is WSMsgType.BINARY:
                    if transport.paused:
                        inbound.deliver()  # what came before the pause is the broker's
                        await transport.reading()
                    if transport.is_closing():
                        break
                    inbound.add(message.data)
                elif message.type is WSMsgType.TEXT:
                    await ws.close(
                        code=WSCloseCode.UNSUPPORTED_DATA, message=b"MQTT needs binary messages"
                    )
                    break
        finally:
            inbound.deliver()
            await transport.lost(client, ws.exception())
        return ws

    return serve


class Inbound:
    """The bytes of the messages read in one go, given to the client in one call: the
    handler takes every message aiohttp already has without yielding to the loop, so a
    burst of small messages (a PUBLISH each, as browsers send them) costs one
    `data_received`, one routing pass and one write per subscriber, as a TCP read does."""

    __slots__ = ("_client", "_loop", "_parts", "_transport")

    def __init__(self, client: asyncio.Protocol, transport: WebSocketTransport) -> None:
        self._client = client
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self._parts: list[bytes] = []

    def add(self, data: bytes) -> None:
        if not self._parts:
            self._loop.call_soon(self.deliver)  # once the handler waits for more
        self._parts.append(data)

    def deliver(self) -> None:
        parts = self._parts
        if not parts:
            return
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        if not self._transport.is_closing():
            self._client.data_received(data)


def _refusal(request: web.Request, ws: web.WebSocketResponse) -> str | None:
    """Why `request` cannot become an MQTT WebSocket, or None."""
    ready = ws.can_prepare(request)
    if not ready.ok:
        return (
            f"{request.path} serves MQTT over WebSockets: send a WebSocket upgrade "
            f"(GET with Upgrade: websocket) offering the subprotocol {SUBPROTOCOLS[0]!r}"
        )
    offered = request.headers.get("Sec-WebSocket-Protocol", "")
    if offered.strip() and ready.protocol is None:
        return (
            f"no MQTT subprotocol among those offered ({offered}): this server speaks "
            f"{' and '.join(repr(p) for p in SUBPROTOCOLS)}"
        )
    return None


class WebSocketTransport(asyncio.Transport):
    """The broker's end of an MQTT connection over a WebSocket (see the module docstring)."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        super().__init__()
        self._ws = ws
        self._inner = request.transport  # the HTTP connection's: peer address, TLS
        self._protocol: asyncio.BaseProtocol | None = None
        self._waiting: list[bytes] = []
        self._size = 0  # bytes written and not sent yet
        self._wake = asyncio.Event()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._closing = False
        self._writing_paused = False
        self._writer = asyncio.get_running_loop().create_task(self._send_loop())

    # -- what the broker calls ------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        inner = self._inner
        return default if inner is None else inner.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._waiting.append(bytes(data))
        self._size += len(data)
        self._wake.set()
        protocol = self._protocol
        if not self._writing_paused and self._size > HIGH_WATER and protocol is not None:
            self._writing_paused = True
            protocol.pause_writing()

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._resumed.set()  # a handler held by pause_reading goes on, to its end
            self._wake.set()

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._resumed.clear()

    def resume_reading(self) -> None:
        self._resumed.set()

    def is_reading(self) -> bool:
        return self._resumed.is_set() and not self._closing

    @property
    def paused(self) -> bool:
        """The broker paused reading (`pause_reading`)."""
        return not self._resumed.is_set()

    def get_write_buffer_size(self) -> int:
        return self._size

    # -- what the handler calls -----------------------------------------------------

    async def reading(self) -> None:
        """Return when the broker reads this connection (at once unless paused)."""
        await self._resumed.wait()

    async def lost(self, client: asyncio.Protocol, exc: BaseException | None) -> None:
        """The WebSocket ended: the connection's end for the broker, then the writer's."""
        self._closing = True
        self._wake.set()
        client.connection_lost(exc if isinstance(exc, Exception) else None)
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer

    # -- inside -----------------------------------------------------------------------

    async def _send_loop(self) -> None:
        ws = self._ws
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._waiting and not ws.closed:
                    data = b"".join(self._waiting)
                    self._waiting.clear()
                    await ws.send_bytes(data)
                    self._size -= len(data)
                    protocol = self._protocol
                    if self._writing_paused and self._size <= LOW_WATER and protocol is not None:
                        self._writing_paused = False
                        protocol.resume_writing()
                if self._closing:
                    await ws.close()
                    return
        except (ConnectionError, RuntimeError) as error:  # the peer went away meanwhile
            log.debug("websocket: sending stopped: %s", error)
            self._closing = True
            await ws.close()
