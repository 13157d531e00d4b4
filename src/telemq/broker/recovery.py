"""A broker on the PostgreSQL store starts again on the store's state after a failed commit.

Theory of operation
-------------------
A commit that fails leaves the broker's memory ahead of its store: what the failed batch
held (a QoS 2 message received and not yet released, a journal row, a session's change) is
in memory and not in the database, and a client that re-sends what was not acknowledged
would be answered from memory: a PUBREC for a QoS 2 message the store never got, a
delivery whose journal row is gone. On the PostgreSQL store a failed commit is an event of
the server's life (it restarted, it failed over to a standby, the network failed), so a
broker without `[ha]` on that store (`run_restarting`) does what a member of an `[ha]` group
does when it steps down (ha.py), without an election: at the failure, before the committer
sends the next batch, its store is given up (`PostgresStore.abandon`: every call fails, it
never connects again), so that nothing more is committed from that memory; the broker drops
every client, stops, and starts again in the same process on a new store and the state
loaded afresh from the database, on the same ports (a port 0 is pinned to the one the first
start bound, so the ready file stays true).

While the database cannot be reached, the start is tried again with backoff
(`FIRST_RETRY_S`, twice as long each time, up to `MAX_BACKOFF_S`), and the log says so once
when it goes and once when it is back, not at every try; its listeners are closed
meanwhile, so clients see a refused connection and try again. A stop (SIGTERM) ends the
waiting at once.

The SQLite store is not restarted: a failed commit there is a failing disk, which the
broker's start would meet again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ..store import StoreError
from ..store.postgres import PostgresStore
from .server import Broker
from .settings.config import BrokerConfig

__all__ = ["FIRST_RETRY_S", "MAX_BACKOFF_S", "run_restarting"]

log = logging.getLogger("telemq.broker")

FIRST_RETRY_S = 0.5
MAX_BACKOFF_S = 5.0


async def run_restarting(
    config: BrokerConfig,
    stop: asyncio.Event,
    on_started: Callable[[Broker], None] | None = None,
) -> None:
    """Run a broker until `stop` is set, starting it again on the store's state whenever a
    commit fails (see the module docstring)."""
    first = _giving_up_at_failure(Broker(config))
    await first.start()
    _pin_ports(config, first)
    if on_started is not None:
        on_started(first)
    broker: Broker | None = first
    loop = asyncio.get_running_loop()
    try:
        while broker is not None:
            failed = loop.create_task(broker.store_failed.wait())
            stopping = loop.create_task(stop.wait())
            await asyncio.wait({failed, stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in (failed, stopping):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if stop.is_set():
                return
            log.error(
                "a commit failed: clients dropped, nothing more acknowledged; starting again on"
                " the store's state"
            )
            stopped, broker = broker, None
            await stopped.stop()
            broker = await _start_again(config, stop)
    finally:
        if broker is not None:
            await broker.stop()


async def _start_again(config: BrokerConfig, stop: asyncio.Event) -> Broker | None:
    """A broker started on the store's state, trying with backoff; None if stopped first."""
    loop = asyncio.get_running_loop()
    wait = FIRST_RETRY_S
    down_since: float | None = None
    while not stop.is_set():
        broker = _giving_up_at_failure(Broker(config))
        try:
            await broker.start()
        except StoreError as error:
            await broker.stop()
            if down_since is None:
                down_since = loop.time()
                log.warning(
                    "cannot start again on the store: %s; trying again, backing off up to %g s",
                    error,
                    MAX_BACKOFF_S,
                )
            else:
                log.debug("still cannot start on the store: %s", error)
                wait = min(wait * 2, MAX_BACKOFF_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            continue
        if down_since is not None:
            log.warning("the store is reachable again after %.1f s", loop.time() - down_since)
        log.warning("serving again on the store's state")
        return broker
    return None


def _giving_up_at_failure(broker: Broker) -> Broker:
    """`broker`, whose store is given up at its first failed commit (module docstring)."""

    def give_up(error: BaseException) -> None:
        store = broker.store
        if isinstance(store, PostgresStore):
            store.abandon(f"a commit failed ({error}); the broker starts again")

    broker.on_store_failure = give_up
    return broker


def _pin_ports(config: BrokerConfig, broker: Broker) -> None:
    """Keep the ports the first start bound (a port 0 picked by the system) for the next."""
    for listener_config, listener in zip(config.listeners, broker.listeners, strict=False):
        if listener_config.port == 0 and listener.ports:
            listener_config.port = listener.ports[0]
    if broker.http is not None:
        for http, port in zip(config.http, broker.http.ports, strict=False):
            http.port = port
