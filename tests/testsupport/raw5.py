"""`Raw5`: a plain TCP socket that speaks MQTT 5.0 with telemq's own codec, and `raw5`, the
fixture that makes them and closes them at the end of the test.

For the tests of what a client library would hide: each reason code the broker sends, each
protocol error it detects, AUTH exchanges. Packets are `telemq.protocol` objects both ways
(`encode` to send, the incremental `Decoder` to read: golden-tested on its own in
tests/protocol/test_codec5.py); `send_bytes` sends anything at all. The broker tests get
`raw5` through tests/broker/conftest.py.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator

import pytest

from telemq.protocol import (
    Auth,
    ConnAck,
    Connect,
    Decoder,
    Disconnect,
    Packet,
    Properties,
    encode,
)
from telemq.protocol.scram import METHOD as SCRAM
from telemq.protocol.scram import ScramClient

from .process import HOST

V5 = 5
WAIT = 10.0  # default deadline for a packet the broker should send "at once"


class ConnectionClosed(AssertionError):
    """The broker closed the connection while a packet was awaited."""


class Raw5:
    """One TCP connection to `port` speaking MQTT 5.0 packet by packet (module docstring)."""

    def __init__(self, port: int, *, timeout: float = WAIT) -> None:
        self.port = port
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = Decoder(protocol_level=V5, mqtt5=True)
        self._packets: deque[Packet] = deque()

    # -- bytes and packets ----------------------------------------------------------------

    def send(self, packet: Packet) -> None:
        self.send_bytes(encode(packet, V5))

    def send_bytes(self, data: bytes) -> None:
        self.sock.settimeout(WAIT)
        self.sock.sendall(data)

    def recv(self, timeout: float = WAIT) -> Packet:
        """The next packet; `TimeoutError` after `timeout` s, `ConnectionClosed` on EOF."""
        deadline = time.monotonic() + timeout
        while not self._packets:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete packet within {timeout} s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise ConnectionClosed(f"the broker closed the connection: {exc}") from exc
            if not data:
                raise ConnectionClosed("the broker closed the connection (EOF)")
            self._packets.extend(self._decoder.feed(data))
        return self._packets.popleft()

    def try_recv(self, timeout: float) -> Packet | None:
        """The next packet, or None when none comes within `timeout` s."""
        try:
            return self.recv(timeout)
        except TimeoutError:
            return None

    def wait_closed(self, timeout: float = WAIT) -> bool:
        """True once the broker has closed the connection (packets before that are
        dropped); False if it is still open after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                self.recv(remaining)
            except ConnectionClosed:
                return True
            except TimeoutError:
                return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    # -- exchanges ------------------------------------------------------------------------

    def connect(
        self,
        client_id: str = "",
        *,
        clean: bool = True,
        properties: Properties | None = None,
        **fields: object,
    ) -> ConnAck:
        """CONNECT (`fields`: the rest of `Connect`'s) and the CONNACK, whatever its code."""
        self.send(
            Connect(
                client_id,
                protocol_level=V5,
                clean_session=clean,
                properties=properties,
                **fields,  # type: ignore[arg-type]
            )
        )
        ack = self.recv()
        assert isinstance(ack, ConnAck), ack
        return ack

    def disconnected(self, timeout: float = WAIT) -> Disconnect:
        """The DISCONNECT the broker sends, then the close."""
        packet = self.recv(timeout)
        assert isinstance(packet, Disconnect), packet
        assert self.wait_closed(), "the broker did not close after its DISCONNECT"
        return packet

    def scram_connect(
        self, user: str, password: str, username: str | None = None, client_id: str = ""
    ) -> tuple[ScramClient, ConnAck]:
        """CONNECT with SCRAM-SHA-256 through to the CONNACK (success or not)."""
        client = ScramClient(user, password)
        self.send(
            Connect(
                client_id,
                protocol_level=V5,
                username=username,
                properties=auth_properties(SCRAM, client.first()),
            )
        )
        reply = self.recv()
        if isinstance(reply, Auth):
            assert reply.reason_code == 0x18
            assert reply.properties is not None
            assert reply.properties.authentication_method == SCRAM
            final = client.final(reply.properties.authentication_data)
            self.send(Auth(0x18, auth_properties(SCRAM, final)))
            reply = self.recv()
        assert isinstance(reply, ConnAck), reply
        return client, reply


def auth_properties(method: str, data: bytes | None) -> Properties:
    """The Authentication Method and Data of a CONNECT or an AUTH."""
    return Properties(authentication_method=method, authentication_data=data)


Raw5Factory = Callable[[int], Raw5]


@pytest.fixture
def raw5() -> Iterator[Raw5Factory]:
    """Make `Raw5` connections to a port; every one is closed at the end of the test."""
    opened: list[Raw5] = []

    def make(port: int) -> Raw5:
        opened.append(Raw5(port))
        return opened[-1]

    yield make
    for client in opened:
        client.close()
