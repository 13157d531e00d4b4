"""What a read produces is written in the order that keeps latency low.

In process: a real broker on a loopback port whose client transports record every write,
and plain socket clients. A publication read from one client is written to its subscribers
before the publisher's own acknowledgement: the subscribers' latency does not include a
write to the publisher.
"""

from __future__ import annotations

import asyncio
from typing import Any

from telemq.broker import BrokerConfig, ListenerConfig
from telemq.broker.core.session import Client
from telemq.broker.server import Broker
from telemq.protocol import Connect, Publish, Subscribe, encode
from telemq.store import MemoryStore


class RecordingTransport:
    """Wraps a client's transport; notes which client each write went to."""

    def __init__(self, transport: Any, client: Client, log: list[tuple[str, bytes]]) -> None:
        self._transport = transport
        self._client = client
        self._log = log

    def write(self, data: bytes) -> None:
        self._log.append((self._client.client_id, bytes(data)))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def record_writes(broker: Broker, log: list[tuple[str, bytes]]) -> None:
    """Wrap the transports of the broker's connected clients (not by subclassing: the
    compiled build's classes cannot be subclassed from Python)."""
    for client in broker.clients:
        client.transport = RecordingTransport(client.transport, client, log)  # type: ignore[assignment]


def test_a_delivery_is_written_before_the_publishers_acknowledgement() -> None:
    config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0
    config.journal.enabled = False  # nothing to commit: the PUBACK is due at once

    async def main() -> None:
        broker = Broker(config, store=MemoryStore())
        writes: list[tuple[str, bytes]] = []
        await broker.start()
        writers: list[asyncio.StreamWriter] = []
        try:
            port = broker.bound_ports[0]
            sub_reader, sub_writer = await asyncio.open_connection("127.0.0.1", port)
            writers.append(sub_writer)
            sub_writer.write(encode(Connect("sub")) + encode(Subscribe(1, [("t/#", 1)])))
            assert (await sub_reader.readexactly(4))[0] == 0x20  # CONNACK
            assert (await sub_reader.readexactly(5))[0] == 0x90  # SUBACK
            pub_reader, pub_writer = await asyncio.open_connection("127.0.0.1", port)
            writers.append(pub_writer)
            pub_writer.write(encode(Connect("pub")))
            assert (await pub_reader.readexactly(4))[0] == 0x20
            record_writes(broker, writes)
            for qos in (1, 2):
                pub_writer.write(encode(Publish("t/x", b"hello", qos, packet_id=7)))
                ack = await pub_reader.readexactly(4)
                assert ack[0] == (0x40 if qos == 1 else 0x50)  # PUBACK / PUBREC
                if qos == 2:
                    pub_writer.write(bytes([0x62, 2, 0, 7]))  # PUBREL
                    assert (await pub_reader.readexactly(4))[0] == 0x70  # PUBCOMP
            order = [(client_id, data[0] & 0xF0) for client_id, data in writes]
            # QoS 1: the delivery, then the PUBACK. QoS 2: the PUBREC (nothing delivered
            # yet), then on PUBREL the delivery before the PUBCOMP.
            assert order[:2] == [("sub", 0x30), ("pub", 0x40)]
            published = [i for i, (who, kind) in enumerate(order) if kind == 0x30]
            completed = order.index(("pub", 0x70))
            assert order.index(("pub", 0x50)) < published[1] < completed
        finally:
            for writer in writers:
                writer.close()
            await broker.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
