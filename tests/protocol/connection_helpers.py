"""Driving a server-side `Connection` with plain function calls, as a broker would."""

from __future__ import annotations

from typing import Any

from telemq.protocol import (
    Connect,
    Connection,
    ConnectRequested,
    Decoder,
    Flows,
    Packet,
    encode,
)

PROTOCOL_NAMES = {3: "MQIsdp", 4: "MQTT"}


def connect_packet(
    level: int = 4,
    client_id: str = "client-1",
    *,
    clean_session: bool = True,
    keepalive: int = 60,
) -> Connect:
    return Connect(
        client_id=client_id,
        protocol_level=level,
        clean_session=clean_session,
        keepalive=keepalive,
        protocol_name=PROTOCOL_NAMES[level],
    )


def open_connection(
    level: int = 4,
    *,
    now: float = 0.0,
    keepalive: int = 60,
    clean_session: bool = True,
    client_id: str = "client-1",
    **options: Any,
) -> Connection:
    """A connection that has received a valid CONNECT (not answered yet).

    `options` go to `Connection` (max_packet_size, connect_timeout, retry_interval)."""
    connection = Connection(now=now, **options)
    packet = connect_packet(level, client_id, clean_session=clean_session, keepalive=keepalive)
    assert connection.receive_data(encode(packet), now) == [ConnectRequested(packet)]
    return connection


def accepted(
    level: int = 4,
    *,
    flows: Flows | None = None,
    session_present: bool = False,
    now: float = 0.0,
    keepalive: int = 60,
    **options: Any,
) -> tuple[Connection, Flows]:
    """A connection whose CONNECT was accepted; the CONNACK is already taken out."""
    connection = open_connection(
        level, now=now, keepalive=keepalive, clean_session=not session_present, **options
    )
    flows = Flows() if flows is None else flows
    connection.accept(session_present, flows, now)
    sent = decode_sent(connection.data_to_send(), level)
    assert sent[0].packet_type == 2  # CONNACK first
    return connection, flows


def decode_sent(data: bytes, level: int = 4) -> list[Packet]:
    """What the server wrote, as packets (it must always be well formed)."""
    decoder = Decoder(protocol_level=level)
    packets = decoder.feed(data)
    assert decoder.buffered == 0
    return packets


def sent_packets(connection: Connection) -> list[Packet]:
    return decode_sent(connection.data_to_send(), connection.protocol_level)
