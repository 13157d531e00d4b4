"""Outbound connections the broker keeps up itself: links to neighbour brokers (links.py)
and bridges to other MQTT brokers (bridges.py).

Theory of operation
-------------------
`keep_dialing` connects, waits until that connection ends, waits a back-off, and again,
until it is cancelled. What runs on the connection is the caller's: `make_client` builds the
`Client` (with its client-role `protocol.DialConnection`) and is given a future that the
caller resolves when the connection is over, so one coroutine per peer is all the state the
loop needs. `Backoff` is full jitter (a random wait between the minimum and a ceiling that
doubles per failure), as Mosquitto's bridges and AWS's advice have it: peers that lost each
other together do not come back in step. A connection that stayed up `STABLE_AFTER` seconds
starts the count again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.session import Client, as_protocol
from ..settings.tls import client_context

if TYPE_CHECKING:
    from ..settings.network import BridgeConfig, LinkConfig

log = logging.getLogger("telemq.broker")

STABLE_AFTER = 30.0  # seconds a connection must stay up for the back-off to start over


@dataclass(slots=True)
class Backoff:
    minimum: float
    maximum: float
    failures: int = 0  # in a row
    up_since: float = 0.0  # monotonic time the last connection came up; 0: not up

    def connected(self) -> None:
        self.up_since = time.monotonic()

    def next_wait(self, longest: bool = False) -> float:
        """Seconds to wait before the next attempt; `longest`: the maximum (a peer that
        refused for a reason the next attempt will not change soon)."""
        if self.up_since and time.monotonic() - self.up_since >= STABLE_AFTER:
            self.failures = 0
        self.up_since = 0.0
        if longest:
            return self.maximum
        self.failures += 1
        ceiling = min(self.maximum, self.minimum * 2 ** min(self.failures, 30))
        return random.uniform(self.minimum, max(self.minimum, ceiling))


@dataclass(slots=True)
class DialTarget:
    """Where and how to dial; `name` is for the log (`link 'hub'`)."""

    name: str
    host: str
    port: int
    ssl: ssl.SSLContext | None = None
    server_name: str = ""


def dial_target(
    name: str, entry: LinkConfig | BridgeConfig, index: int, table: str = "links"
) -> DialTarget:
    """Where a `[[links]]` or `[[bridges]]` entry dials, with its TLS context (`index`:
    its place in `table`, for errors)."""
    return DialTarget(
        name,
        entry.host,
        entry.port,
        client_context(entry, f"{table}[{index}]"),
        entry.server_name,
    )


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Stop the dialing tasks and wait for them to end."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def keep_dialing(
    target: DialTarget,
    backoff: Backoff,
    make_client: Callable[[asyncio.Future[None]], Client],
    on_attempt: Callable[[], None],
    on_failure: Callable[[], None],
    longest_wait: Callable[[], bool],
) -> None:
    """Keep one outbound connection up until cancelled (see module docstring).
    `on_attempt` and `on_failure` (no TCP or TLS connection) report to the caller's state;
    `longest_wait` says whether the next wait is the longest."""
    loop = asyncio.get_running_loop()

    def protocol(ended: asyncio.Future[None]) -> asyncio.Protocol:
        return as_protocol(make_client(ended))

    while True:
        on_attempt()
        ended: asyncio.Future[None] = loop.create_future()
        try:
            await loop.create_connection(
                functools.partial(protocol, ended),
                target.host,
                target.port,
                ssl=target.ssl,
                server_hostname=(target.server_name or target.host) if target.ssl else None,
            )
            await ended
        except (TimeoutError, OSError) as error:  # refused, unreachable, DNS, TLS
            on_failure()
            log.info(
                "%s: cannot connect to %s:%d: %s", target.name, target.host, target.port, error
            )
        await asyncio.sleep(backoff.next_wait(longest_wait()))
