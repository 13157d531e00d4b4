"""The broker handles every event the protocol core can produce.

Events are dispatched by a table keyed by their type (one lookup per event); an event type
added to the core without a handler would stop a client's reads with a KeyError, so the
table is checked against the core's `Event` union.
"""

from __future__ import annotations

import asyncio
from typing import get_args

from telemq.broker import BrokerConfig, ListenerConfig
from telemq.broker.server import Broker
from telemq.protocol import Event
from telemq.store import MemoryStore


def test_every_protocol_event_has_a_handler() -> None:
    config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0

    async def main() -> None:
        broker = Broker(config, store=MemoryStore())
        await broker.start()
        try:
            assert set(broker.hub.event_handlers) == set(get_args(Event))
        finally:
            await broker.stop()

    asyncio.run(main())
