"""Embedding: in-process subscribers of a broker that runs inside an asyncio program.

Theory of operation
-------------------
`Broker.subscribe` gives in-process code a session of its own, without a connection: a clean
session whose deliveries go to a `CallbackTarget` (the `session.DeliveryTarget` seam) instead
of a client. Routing, retained messages and content filters treat it like any MQTT
subscriber; a delivery is done when the callback returns, so it never waits in an in-flight
window. A subscription without a callback queues what it receives for `await
subscription.get()` or `async for received in subscription`. `cancel()` ends the session.

In-process subscribers are trusted code: the hooks' authorization is not asked. Their
sessions are not persistent (they end with the program), so nothing of theirs is stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, NamedTuple

from .core.message import Message

if TYPE_CHECKING:
    from .core.session import Session

log = logging.getLogger("telemq.broker")


class Received(NamedTuple):
    """One message delivered to an in-process subscriber."""

    topic: str
    payload: bytes
    qos: int  # as delivered: min(published, subscribed)
    retain: bool  # True for a retained message sent when the subscription was made


class CallbackTarget:
    """A `DeliveryTarget` that hands every delivery to a function."""

    def __init__(self, callback: Callable[[Received], None]) -> None:
        self._callback = callback

    def take(self, message: Message, qos: int, retain: bool, properties: bytes) -> bool:
        self._callback(Received(message.topic, message.payload, qos, retain))
        return True


class LocalSubscription:
    """What `Broker.subscribe` returns: the subscriber's session, and its messages when no
    callback was given."""

    def __init__(
        self,
        end: Callable[[Session], None],
        session: Session,
        queue: asyncio.Queue[Received] | None,
    ) -> None:
        self._end = end  # the broker's end of an in-process session
        self._session = session
        self._queue = queue

    @property
    def client_id(self) -> str:
        return self._session.client_id

    async def get(self) -> Received:
        """The next message (a subscription made without a callback)."""
        if self._queue is None:
            raise RuntimeError("this subscription delivers to its callback")
        return await self._queue.get()

    def __aiter__(self) -> AsyncIterator[Received]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Received]:
        while True:
            yield await self.get()

    def cancel(self) -> None:
        """End the subscription and its session."""
        self._end(self._session)
