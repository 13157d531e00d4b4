"""A small blocking MQTT 3.1.1 client over the sans-IO codec.

For tools that talk to a running broker (the `telemq subs` commands, the
pipeline's sink): connect, publish with QoS 0/1, subscribe, wait for a message.
Not a general-purpose client: one thread, no reconnection, no QoS 2 receive.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from typing import TypeVar

from .protocol import (
    ConnAck,
    Connect,
    Decoder,
    Packet,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    encode,
)
from .protocol.packets import Disconnect

T = TypeVar("T")


class ClientError(Exception):
    """The broker refused, closed the connection, or did not answer in time."""


class BlockingClient:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        clean_session: bool = True,
        timeout: float = 10.0,
    ) -> None:
        self.client_id = client_id or f"telemq-tool-{uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self._decoder = Decoder()
        self._pending: list[Packet] = []
        self._next_id = 0
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as error:
            raise ClientError(f"cannot connect to {host}:{port}: {error}") from None
        self._send(
            Connect(
                self.client_id,
                clean_session=clean_session,
                keepalive=0,
                username=username,
                password=password.encode("utf-8") if password is not None else None,
            )
        )
        connack = self._expect(ConnAck)
        if connack.return_code != 0:
            raise ClientError(f"the broker refused the connection (CONNACK {connack.return_code})")

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._send(Disconnect())
        self._sock.close()

    def _packet_id(self) -> int:
        self._next_id = self._next_id % 65535 + 1
        return self._next_id

    def _send(self, packet: Packet) -> None:
        self._sock.sendall(encode(packet))

    def _read(self, deadline: float) -> Packet:
        while not self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ClientError("timed out waiting for the broker")
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                raise ClientError("timed out waiting for the broker") from None
            if not data:
                raise ClientError("the broker closed the connection")
            self._pending.extend(self._decoder.feed(data))
        return self._pending.pop(0)

    def _expect(self, kind: type[T]) -> T:
        deadline = time.monotonic() + self.timeout
        held: list[Packet] = []
        try:
            while True:
                packet = self._read(deadline)
                if isinstance(packet, kind):
                    return packet
                held.append(packet)
        finally:
            self._pending[:0] = held

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        """Publish; with QoS 1 or 2, returns once the broker acknowledged it."""
        packet_id = self._packet_id() if qos else 0
        self._send(Publish(topic, payload, qos, retain, False, packet_id))
        if qos == 1:
            self._expect(PubAck)
        elif qos == 2:
            self._expect(PubRec)
            self._send(PubRel(packet_id))
            self._expect(PubComp)

    def subscribe(self, topic_filter: str, qos: int = 1) -> int:
        self._send(Subscribe(self._packet_id(), [(topic_filter, qos)]))
        return self._expect(SubAck).return_codes[0]

    def receive(self, timeout: float | None = None) -> Publish:
        """The next PUBLISH (acknowledged if QoS 1)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        held: list[Packet] = []
        try:
            while True:
                packet = self._read(deadline)
                if isinstance(packet, Publish):
                    if packet.qos == 1:
                        self._send(PubAck(packet.packet_id))
                    return packet
                held.append(packet)
        finally:
            self._pending[:0] = [p for p in held if not isinstance(p, PingReq)]
