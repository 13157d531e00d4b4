"""A broker inside an asyncio program: `telemq.Broker`, in-process publish and subscribe.

The in-process subscriber is a delivery target that is not a client (`DeliveryTarget`); the
tests mix it with a real MQTT connection on a loopback TCP port, in both directions.
"""

from __future__ import annotations

import asyncio

import pytest

import telemq
from telemq.broker import BrokerConfig, ListenerConfig
from telemq.broker.core.message import Message
from telemq.broker.embedded import Received
from telemq.protocol import Connect, Publish, Subscribe, encode
from telemq.protocol.codec import Decoder
from telemq.protocol.packets import ConnAck, PubAck, SubAck
from telemq.store import MemoryStore
from telemq.subscriptions import Identity, Subscription


def quiet_config() -> BrokerConfig:
    config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0
    return config


def test_publish_and_subscribe_in_process_without_any_listener() -> None:
    async def main() -> None:
        async with telemq.Broker(quiet_config(), store=MemoryStore(), listeners=[]) as broker:
            assert broker.bound_ports == []
            broker.publish("sensors/kept", b"21.5", qos=1, retain=True)
            readings = broker.subscribe("sensors/#", qos=1)
            assert await asyncio.wait_for(readings.get(), 5) == Received(
                "sensors/kept", b"21.5", 1, True
            )
            broker.publish("sensors/live", b"22.0", qos=2)
            broker.publish("other/topic", b"not for us")
            broker.publish("sensors/zero", b"q0", qos=0)
            assert await asyncio.wait_for(readings.get(), 5) == Received(
                "sensors/live", b"22.0", 1, False
            )
            assert await asyncio.wait_for(readings.get(), 5) == Received(
                "sensors/zero", b"q0", 0, False
            )
            readings.cancel()
            broker.publish("sensors/after", b"gone")
            sentinel = broker.subscribe("sentinel")
            broker.publish("sentinel", b"s")
            await asyncio.wait_for(sentinel.get(), 5)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(readings.get(), 0.05)

    asyncio.run(main())


def test_retained_messages_reach_an_in_process_subscriber_at_qos_0_too() -> None:
    async def main() -> None:
        async with telemq.Broker(quiet_config(), store=MemoryStore(), listeners=[]) as broker:
            broker.publish("kept/0", b"zero", qos=0, retain=True)
            broker.publish("kept/1", b"one", qos=1, retain=True)
            subscription = broker.subscribe("kept/+", qos=0)
            got = [await asyncio.wait_for(subscription.get(), 5) for _ in range(2)]
            assert got == [
                Received("kept/0", b"zero", 0, True),
                Received("kept/1", b"one", 0, True),
            ]

    asyncio.run(main())


def test_an_mqtt_client_and_an_in_process_subscriber_exchange_messages() -> None:
    async def main() -> None:
        async with telemq.Broker(quiet_config(), store=MemoryStore()) as broker:
            seen: list[Received] = []
            broker.subscribe("from/client/+", seen.append, qos=1)
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.bound_ports[0])
            decoder = Decoder()
            received: list[object] = []

            async def next_packet() -> object:
                while not received:
                    data = await asyncio.wait_for(reader.read(65536), 5)
                    assert data
                    received.extend(decoder.feed(data))
                return received.pop(0)

            writer.write(encode(Connect("mqtt-peer")) + encode(Subscribe(1, [("from/app", 1)])))
            assert isinstance(await next_packet(), ConnAck)
            assert isinstance(await next_packet(), SubAck)
            writer.write(encode(Publish("from/client/1", b"hello app", 1, packet_id=9)))
            assert await next_packet() == PubAck(9)
            assert seen == [Received("from/client/1", b"hello app", 1, False)]
            broker.publish("from/app", b"hello client", qos=1)
            delivered = await next_packet()
            assert isinstance(delivered, Publish)
            assert (delivered.topic, delivered.payload, delivered.qos) == (
                "from/app",
                b"hello client",
                1,
            )
            writer.close()

    asyncio.run(main())


def test_no_mqtt_client_can_take_an_in_process_subscription_by_its_client_id() -> None:
    """In-process sessions belong to no user a CONNECT can name: presenting their client id
    is refused (CONNACK 5) and the subscription keeps receiving."""

    async def main() -> None:
        async with telemq.Broker(quiet_config(), store=MemoryStore()) as broker:
            seen: list[Received] = []
            broker.subscribe("inside", seen.append, qos=1)
            (local_id,) = [c for c in broker.sessions_room.by_id if c.startswith("telemq-local")]
            for clean in (True, False):
                reader, writer = await asyncio.open_connection("127.0.0.1", broker.bound_ports[0])
                writer.write(encode(Connect(local_id, clean_session=clean)))
                (ack,) = Decoder().feed(await asyncio.wait_for(reader.read(65536), 5))
                assert isinstance(ack, ConnAck) and ack.return_code == 5
                assert await asyncio.wait_for(reader.read(65536), 5) == b""
                writer.close()
            broker.publish("inside", b"still mine", qos=1)
            assert seen == [Received("inside", b"still mine", 1, False)]

    asyncio.run(main())


def test_a_target_that_cannot_take_a_message_keeps_it_queued_in_order() -> None:
    class Gate:
        """A delivery target that takes messages only while open (a busy link)."""

        def __init__(self) -> None:
            self.open = False
            self.taken: list[bytes] = []

        def take(self, message: Message, qos: int, retain: bool, properties: bytes) -> bool:
            if self.open:
                self.taken.append(message.payload)
            return self.open

    async def main() -> None:
        async with telemq.Broker(quiet_config(), store=MemoryStore(), listeners=[]) as broker:
            gate = Gate()
            session = broker.sessions_room.open_local(gate, "")
            broker.registry.add(
                Subscription(
                    id=broker.registry.new_id(),
                    identity=Identity(broker.config.name, session.client_id),
                    topic="t",
                    qos=1,
                )
            )
            for n in range(3):
                broker.publish("t", b"%d" % n, qos=1)
            broker.publish("t", b"dropped at QoS 0", qos=0)
            assert gate.taken == [] and len(session.queue) == 3
            gate.open = True
            broker.deliveries.pump(session)
            assert gate.taken == [b"0", b"1", b"2"] and not session.queue
            assert broker.sys_values()["$SYS/broker/messages/dropped"] == "1"  # the QoS 0 one

    asyncio.run(main())


def test_bad_arguments_are_refused_with_a_message() -> None:
    async def main() -> None:
        async with telemq.Broker(quiet_config(), store=MemoryStore(), listeners=[]) as broker:
            with pytest.raises(ValueError, match="invalid topic filter"):
                broker.subscribe("a/#/b")
            with pytest.raises(ValueError, match="invalid topic name"):
                broker.publish("a/+", b"")
            with pytest.raises(ValueError, match="qos must be 0, 1 or 2"):
                broker.publish("a", b"", qos=3)
            with pytest.raises(ValueError, match="not declared"):
                broker.subscribe("a", sub_point="nowhere")

    asyncio.run(main())
