"""The broker's seams used the way the next features will use them.

In process, without sockets: a broker whose only listener is a `MemoryListener`, raw MQTT
packets over in-memory connections, and hooks that record what happens and deny what they
are told to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

import pytest

from telemq.broker import BrokerConfig
from telemq.broker.core.message import Message
from telemq.broker.edges.listeners import MemoryConnection, MemoryListener
from telemq.broker.security.acl import Action
from telemq.broker.security.hooks import Hook, Hooks
from telemq.broker.server import Broker
from telemq.protocol import Connect, Disconnect, Publish, Subscribe, Unsubscribe, encode
from telemq.protocol.codec import Decoder
from telemq.protocol.packets import ConnAck, Packet, PubAck, SubAck, UnsubAck
from telemq.store import MemoryStore
from telemq.subscriptions import Subscription


class MemoryPeer:
    """Raw MQTT over an in-memory connection."""

    def __init__(self, connection: MemoryConnection) -> None:
        self.connection = connection
        self.decoder = Decoder()
        self.received: list[Packet] = []

    @classmethod
    async def connect(
        cls, listener: MemoryListener, client_id: str, username: str | None = None
    ) -> tuple[MemoryPeer, ConnAck]:
        peer = cls(await listener.connect())
        peer.send(Connect(client_id, username=username, password=b"pw" if username else None))
        connack = await peer.next()
        assert isinstance(connack, ConnAck)
        return peer, connack

    def send(self, packet: Connect | Publish | Subscribe | Unsubscribe | Disconnect) -> None:
        self.connection.write(encode(packet))

    async def next(self, timeout: float = 5.0) -> Packet:
        while not self.received:
            data = await asyncio.wait_for(self.connection.read(), timeout)
            assert data, "connection closed"
            self.received += self.decoder.feed(data)
        return self.received.pop(0)


class RecordingHook(Hook):
    """Records every notification; denies publishing under `secret/`."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def authorize(self, action: Action, topic: str, user_id: str, client_id: str) -> bool | None:
        self.events.append(("authorize", action.value, topic, client_id))
        if action is Action.PUBLISH and topic.startswith("secret/"):
            return False
        return None

    def on_message_accepted(self, message: Message) -> None:
        self.events.append(("accepted", message.topic, message.payload))

    def on_session_up(self, client_id: str, user_id: str, resumed: bool) -> None:
        self.events.append(("up", client_id, resumed))

    def on_session_down(self, client_id: str, graceful: bool, reason: str) -> None:
        self.events.append(("down", client_id, graceful))

    def on_subscribed(self, subscription: Subscription) -> None:
        self.events.append(("subscribed", subscription.queue, subscription.topic))

    def on_unsubscribed(self, subscription: Subscription) -> None:
        self.events.append(("unsubscribed", subscription.queue, subscription.topic))


class PasswordHook(Hook):
    """Only user `alice` with password `pw` may connect."""

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None
    ) -> bool | None:
        return username == "alice" and password == b"pw"


@contextlib.asynccontextmanager
async def in_memory(hooks: Sequence[Hook] = ()) -> AsyncIterator[tuple[Broker, MemoryListener]]:
    config = BrokerConfig()
    config.sys.interval = 0
    config.journal.enabled = False
    listener = MemoryListener()
    broker = Broker(config, store=MemoryStore(), hooks=hooks, listeners=[listener])
    await broker.start()
    try:
        yield broker, listener
    finally:
        await broker.stop()


def test_a_broker_with_only_an_in_memory_listener_routes_messages() -> None:
    async def main() -> None:
        async with in_memory() as (broker, listener):
            assert broker.bound_ports == []  # no socket was opened
            subscriber, connack = await MemoryPeer.connect(listener, "sub")
            assert connack.return_code == 0
            subscriber.send(Subscribe(1, [("t/#", 1)]))
            assert isinstance(await subscriber.next(), SubAck)
            publisher, _ = await MemoryPeer.connect(listener, "pub")
            publisher.send(Publish("t/1", b"hello", 1, packet_id=5))
            assert await publisher.next() == PubAck(5)
            delivered = await subscriber.next()
            assert isinstance(delivered, Publish)
            assert (delivered.topic, delivered.payload, delivered.qos) == ("t/1", b"hello", 1)
            assert broker.sessions["sub"].client is not None

    asyncio.run(main())


def test_reads_paused_on_an_in_memory_connection_wait_and_then_arrive_in_order() -> None:
    async def main() -> None:
        async with in_memory() as (broker, listener):
            subscriber, _ = await MemoryPeer.connect(listener, "sub")
            subscriber.send(Subscribe(1, [("t", 0)]))
            assert isinstance(await subscriber.next(), SubAck)
            publisher, _ = await MemoryPeer.connect(listener, "pub")
            (client,) = [c for c in broker.clients if c.client_id == "pub"]
            assert client.transport is not None
            client.transport.pause_reading()  # what back-pressure does
            for n in range(3):
                publisher.send(Publish("t", b"%d" % n, 0))
            publisher.send(Publish("t", b"sentinel", 0))
            with pytest.raises(TimeoutError):
                await subscriber.next(0.2)
            client.transport.resume_reading()
            payloads = [getattr(await subscriber.next(), "payload", None) for _ in range(4)]
            assert payloads == [b"0", b"1", b"2", b"sentinel"]

    asyncio.run(main())


def test_a_recording_hook_denies_a_publish_and_sees_every_event() -> None:
    hook = RecordingHook()

    async def main() -> None:
        async with in_memory([hook]) as (_broker, listener):
            subscriber, _ = await MemoryPeer.connect(listener, "sub")
            subscriber.send(Subscribe(1, [("#", 1)]))
            assert isinstance(await subscriber.next(), SubAck)
            publisher, _ = await MemoryPeer.connect(listener, "pub")
            publisher.send(Publish("secret/plans", b"denied", 1, packet_id=1))
            assert await publisher.next() == PubAck(1)  # acknowledged, and dropped
            publisher.send(Publish("open/news", b"allowed", 1, packet_id=2))
            assert await publisher.next() == PubAck(2)
            delivered = await subscriber.next()
            assert isinstance(delivered, Publish)
            assert delivered.topic == "open/news"  # the denied one never arrived before it
            subscriber.send(Unsubscribe(2, ["#"]))
            assert isinstance(await subscriber.next(), UnsubAck)
            subscriber.send(Disconnect())
            publisher.connection.close()
            # Both ends are seen once the subscriber's connection is closed by the broker and
            # the publisher's session is gone.
            assert await subscriber.connection.read() == b""
            for _ in range(100):
                if sum(1 for e in hook.events if e[0] == "down") == 2:
                    break
                await asyncio.sleep(0.01)

    asyncio.run(main())
    notifications = [e for e in hook.events if e[0] != "authorize"]
    assert notifications == [
        ("up", "sub", False),
        ("subscribed", "sub", "#"),
        ("up", "pub", False),
        ("accepted", "open/news", b"allowed"),
        ("unsubscribed", "sub", "#"),
        ("down", "sub", True),
        ("down", "pub", False),
    ]
    assert ("authorize", "subscribe", "#", "sub") in hook.events
    assert ("authorize", "publish", "secret/plans", "pub") in hook.events


def test_an_authenticate_hook_decides_who_connects() -> None:
    async def main() -> None:
        async with in_memory([PasswordHook()]) as (_broker, listener):
            _, accepted = await MemoryPeer.connect(listener, "a", username="alice")
            assert accepted.return_code == 0
            _, refused = await MemoryPeer.connect(listener, "m", username="mallory")
            assert refused.return_code == 4  # bad user name or password
            _, anonymous = await MemoryPeer.connect(listener, "x")
            assert anonymous.return_code == 5  # not authorized

    asyncio.run(main())


def test_a_failing_notification_hook_is_logged_and_the_client_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Hook):
        def on_message_accepted(self, message: Message) -> None:
            raise RuntimeError("hook bug")

    async def main() -> None:
        async with in_memory([Broken()]) as (_broker, listener):
            peer, _ = await MemoryPeer.connect(listener, "p")
            peer.send(Subscribe(1, [("t", 1)]))
            assert isinstance(await peer.next(), SubAck)
            peer.send(Publish("t", b"still delivered", 1, packet_id=3))
            packets = [await peer.next(), await peer.next()]
            assert PubAck(3) in packets
            assert any(isinstance(p, Publish) and p.payload == b"still delivered" for p in packets)

    with caplog.at_level(logging.ERROR, logger="telemq.broker"):
        asyncio.run(main())
    assert "hook bug" in caplog.text


def test_hooks_are_resolved_per_event_so_unused_events_cost_nothing() -> None:
    empty = Hooks(())
    assert empty.authenticators == empty.authorizers == empty.accepted == ()
    assert empty.session_up == empty.session_down == empty.subscribed == empty.unsubscribed == ()
    assert empty.may(Action.PUBLISH, "t", "", "c") and empty.authenticate("c", None, None)
    only_auth = Hooks([PasswordHook()])
    assert len(only_auth.authenticators) == 1
    assert only_auth.authorizers == only_auth.accepted == only_auth.subscribed == ()


def test_the_reason_a_connection_ended_is_logged_with_its_reason_code(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with in_memory() as (_broker, listener):
            garbage = await listener.connect()
            garbage.write(b"\x10\x02\xff\xff")  # a CONNECT whose body is not one
            assert await garbage.read() == b""  # closed by the broker
            first, _ = await MemoryPeer.connect(listener, "same-id")
            _second, accepted = await MemoryPeer.connect(listener, "same-id")
            assert accepted.return_code == 0
            assert await first.connection.read() == b""  # taken over

    with caplog.at_level(logging.INFO, logger="telemq.broker"):
        asyncio.run(main())
    assert "(client '-'): malformed packet: " in caplog.text
    assert "[0x81 malformed packet]" in caplog.text
    assert "session taken over by a new connection with the same client id" in caplog.text
    assert "[0x8E session taken over]" in caplog.text
