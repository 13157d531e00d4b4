"""One active broker, any number of standbys, elected through their PostgreSQL store.

Theory of operation
-------------------
Brokers configured with the same PostgreSQL store and `[ha] enabled = true` (docs/ha.md)
are one broker to their clients: the same `name`, the same state, served by one of them at a
time. The election is the store's session-level advisory lock (store/postgres_connection.py),
and it is held on the very connection the active broker commits on, so a commit can only
succeed while its broker holds the leadership: a connection that breaks takes the lock with
it, and the elected store never connects again (store/postgres.py).

A `Member` runs one broker process through its roles, in a loop until it is stopped:

1. **Standby.** It builds none of the broker's state. Its MQTT listeners are open and refuse
   every CONNECT, "server unavailable" (edges/standby.py: CONNACK 3, or 0x88 with the Server
   Reference `server_reference` names to an MQTT 5.0 client); its `[[http]]` listeners answer
   `/health` with 503 and everything else with 503 too (operations/health.py). Its own
   connection to the database tries the lock every `poll_interval` (`pg_try_advisory_lock`,
   on a worker thread), and names the holder to `/health` meanwhile.
2. **Takeover.** The connection that won becomes the store's (`PostgresStore(elected=...)`),
   and the broker starts exactly as at a start-up (server.py: load the store, restore,
   listen) on the same ports: sessions, queues, in-flight and held QoS 2 messages, retained
   messages, registrations and the journal are those the previous active broker committed,
   and nothing it did not commit was acknowledged. `Leadership.takeovers` counts it.
3. **Active**, until it is stopped (a clean stop: the lock goes with the store's
   connection) or the store loses the leadership: a commit fails on a broken connection, or
   the watchdog (`check_leadership` every `poll_interval`, on the store's own thread, between
   commits) finds the connection gone or the lock not held. Then it **steps down** at once:
   its MQTT listeners stop accepting, every client is dropped, nothing more is acknowledged
   (acknowledgements wait for commits, and every commit now fails), the broker is stopped and
   its state dropped. It stands by again (1) and waits `rejoin_delay` before it tries for the
   lock, leaving the election to the other members first; it is never active again without
   winning the lock again, and then it loads the state afresh.

The lease. A connection can also go silent without breaking: a path that swallows packets
while every socket stays open (a proxy, a half-open connection) leaves the commit in flight
waiting and the server's TCP keepalives answered. So the active broker renews a lease
(`[ha] lease`) with every watchdog check: the server ends the elected session once it has
been silent that long (store/postgres.py `hold_lease`), which releases the lock for another
member, and the broker steps down when a check does not come back within the lease,
shutting the stuck connection (`abandon`) so that nothing waits on it. Neither side needs
the other to notice first: a commit can only succeed on the session that holds the lock.

A standby that cannot reach the store backs off (twice the wait each time, up to
`MAX_BACKOFF_S`), and logs the loss and the return of the store once each.

The ports a member's listeners bound as a standby are kept for its active turns (a port 0
is the one the system picked at the first bind), so `--ready-file` is written once, when
the standby first listens, and stays true.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..store import StoreError, SyncMode
from .edges.listeners import Listener, TcpListener
from .edges.standby import StandbyRefusal
from .operations.leadership import STANDBY, Leadership
from .server import Broker
from .settings.config import BrokerConfig

if TYPE_CHECKING:
    import psycopg

    from ..store.postgres import PostgresStore
    from .operations.health import StandbyHttp

__all__ = ["Member", "run_ha_broker"]

log = logging.getLogger("telemq.ha")

# The longest wait between a standby's tries while the store cannot be reached.
MAX_BACKOFF_S = 5.0

# Called once the standby first listens: its MQTT listeners and its HTTP listeners' ports.
OnReady = Callable[[Sequence[Listener], Sequence[int]], None]


async def run_ha_broker(
    config: BrokerConfig, stop: asyncio.Event, on_ready: OnReady | None = None
) -> None:
    """Run a member of an `[ha]` group until `stop` is set (see the module docstring)."""
    await Member(config).run(stop, on_ready)


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds`, or less if `stop` is set meanwhile; whether it was."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


class Member:
    """One broker process of an `[ha]` group: standby, takeover, active, step-down."""

    def __init__(self, config: BrokerConfig) -> None:
        config.validate()
        location = config.store.postgres()
        if not config.ha.enabled or location is None:
            raise ValueError("a member of an [ha] group needs [ha] enabled and the postgres store")
        self.config = config
        self.location = location
        member = config.ha.member or socket.gethostname()
        self.application = f"telemq (broker {config.name}, member {member})"
        self.leadership = Leadership(
            config.name,
            enabled=True,
            member=member,
            role=STANDBY,
            server_reference=config.ha.server_reference,
        )
        self.listeners: list[Listener] = []  # the standby's MQTT listeners
        self.http: StandbyHttp | None = None  # the standby's HTTP listeners
        self.broker: Broker | None = None  # while active
        self._candidate: psycopg.Connection[Any] | None = None  # trying for the lock
        self._lost: asyncio.Event | None = None  # set when the active broker steps down
        self._why = ""

    async def run(self, stop: asyncio.Event, on_ready: OnReady | None = None) -> None:
        delay = 0.0
        ready = on_ready
        try:
            while not stop.is_set():
                await self._stand_by()
                if ready is not None:
                    ready(self.listeners, self.http.ports if self.http is not None else [])
                    ready = None
                elected = None
                if not await _stopped_within(stop, delay):
                    elected = await self._elect(stop)
                await self._end_standby()
                if elected is None or not await self._serve(elected, stop):
                    return
                delay = self.config.ha.rejoin_delay
        finally:
            await self._end_standby()
            await self._drop_candidate()

    # -- standing by -----------------------------------------------------------------------

    async def _stand_by(self) -> None:
        config = self.config
        self.leadership.stand_by()
        timeout = config.limits.connect_timeout
        for index, listener in enumerate(config.listeners):
            standby = TcpListener(listener, f"listeners[{index}]", timeout)
            await standby.start(
                functools.partial(
                    StandbyRefusal,
                    config.ha.server_reference,
                    config.limits.max_packet_size,
                    timeout,
                )
            )
            if listener.port == 0 and standby.ports:
                listener.port = standby.ports[0]  # the same port for the active turns
            self.listeners.append(standby)
        if config.http:
            from .operations.health import StandbyHttp  # aiohttp only with [[http]]

            self.http = StandbyHttp(config.http, self.leadership)
            await self.http.start()
            for http, port in zip(config.http, self.http.ports, strict=True):
                http.port = port
        log.info("standing by (member %s)", self.leadership.member)

    async def _end_standby(self) -> None:
        listeners, self.listeners = self.listeners, []
        for listener in listeners:
            listener.close()
        for listener in listeners:
            await listener.wait_closed()
        if self.http is not None:
            await self.http.stop()
            self.http = None

    async def _elect(self, stop: asyncio.Event) -> psycopg.Connection[Any] | None:
        """Try for the lock every poll interval until won (the connection that holds it) or
        `stop` is set (None). While the store cannot be reached the tries back off (twice
        the wait each time, up to `MAX_BACKOFF_S`), and the log says so once when it goes
        and once when it is back, not at every try."""
        loop = asyncio.get_running_loop()
        poll = self.config.ha.poll_interval
        unreachable_since: float | None = None  # loop time of the first failed try
        wait = poll
        while not stop.is_set():
            try:
                won, holder = await loop.run_in_executor(None, self._try)
            except StoreError as error:
                if unreachable_since is None:
                    unreachable_since = loop.time()
                    log.warning(
                        "cannot reach the store to stand for election: %s; trying again,"
                        " backing off up to %g s",
                        error,
                        max(poll, MAX_BACKOFF_S),
                    )
                else:
                    log.debug("still cannot reach the store: %s", error)
                    wait = min(wait * 2, max(poll, MAX_BACKOFF_S))
                await self._drop_candidate()
            else:
                if unreachable_since is not None:
                    log.warning(
                        "the store is reachable again after %.1f s",
                        loop.time() - unreachable_since,
                    )
                unreachable_since = None
                wait = poll
                if won:
                    conn, self._candidate = self._candidate, None
                    return conn
                if holder != self.leadership.active:
                    log.info("standing by: the active broker is %s", holder)
                self.leadership.active = holder
            if await _stopped_within(stop, wait):
                break
        return None

    def _try(self) -> tuple[bool, str]:
        """On a worker thread: (won, the holder of the lock when not)."""
        import psycopg

        from ..store.postgres_connection import connect, holder, one_line, try_lock

        if self._candidate is None or self._candidate.closed or self._candidate.broken:
            self._candidate = connect(self.location, application=self.application, keepalives=True)
        try:
            if try_lock(self._candidate):
                return True, ""
            return False, holder(self._candidate)
        except psycopg.Error as exc:
            raise StoreError(f"the election failed: {one_line(exc)}") from None

    async def _drop_candidate(self) -> None:
        conn, self._candidate = self._candidate, None
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(None, conn.close)

    # -- active ----------------------------------------------------------------------------

    async def _serve(self, elected: psycopg.Connection[Any], stop: asyncio.Event) -> bool:
        """Be the active broker until stopped (False) or stepped down (True)."""
        from ..store.postgres import PostgresStore  # psycopg only for a member of a group
        from ..store.postgres_schema import NewerSchema

        loop = asyncio.get_running_loop()
        config = self.config
        leadership = self.leadership
        leadership.activate()
        log.warning(
            "elected: member %s is the active broker %r (takeover %d)",
            leadership.member,
            config.name,
            leadership.takeovers,
        )
        lost = self._lost = asyncio.Event()
        self._why = ""
        leadership.on_lost = self._step_down_now
        store: PostgresStore | None
        try:
            store = await loop.run_in_executor(
                None,
                functools.partial(
                    PostgresStore,
                    self.location,
                    SyncMode(config.store.sync),
                    config.name,
                    elected=elected,
                ),
            )
        except NewerSchema:
            elected.close()
            raise  # not this member's to fix: "cannot start", as without [ha]
        except StoreError as error:  # the connection went while the store was opened
            self._why = str(error)
            elected.close()
            store = None
        if store is not None:
            broker = self.broker = Broker(config, store=store, leadership=leadership)
            try:
                await broker.start()
            except StoreError as error:
                if not store.lost:  # the load failed, and not for the connection
                    leadership.stand_by()
                    await broker.stop()
                    raise
                self._why = str(error)
            except BaseException:
                leadership.stand_by()
                await broker.stop()
                raise
            if not self._why:
                watchdog = loop.create_task(self._watch(broker, store))
                stopping = loop.create_task(stop.wait())
                losing = loop.create_task(lost.wait())
                await asyncio.wait({stopping, losing}, return_when=asyncio.FIRST_COMPLETED)
                for task in (watchdog, stopping, losing):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        leadership.on_lost = None
        stepped_down = bool(self._why) and not stop.is_set()
        leadership.stand_by()
        if stepped_down:
            log.error(
                "stepping down: %s; clients dropped, nothing more acknowledged; standing by"
                " (member %s)",
                self._why,
                leadership.member,
            )
        if self.broker is not None:
            await self.broker.stop()
            self.broker = None
        return stepped_down

    def _step_down_now(self, reason: str) -> None:
        """The store lost the leadership (on the event loop): stop serving at once; `_serve`
        stops the broker."""
        if self._why:
            return
        self._why = reason
        broker = self.broker
        if broker is not None:
            for listener in broker.listeners:
                listener.close()
            broker.sessions_room.close_all(f"stepping down: {reason}")
        if self._lost is not None:
            self._lost.set()

    async def _watch(self, broker: Broker, store: PostgresStore) -> None:
        """Every poll interval, on the store's thread: does its connection hold the lock?
        The first call takes the lease; a store that does not answer within it (a commit
        or the check stuck on a connection that swallows packets) is abandoned: the broker
        steps down, and the server ends the silent session when the lease runs out."""
        loop = asyncio.get_running_loop()
        lease = self.config.ha.lease
        renew: Callable[[], None] = functools.partial(store.hold_lease, lease)
        while True:
            try:
                await asyncio.wait_for(
                    loop.run_in_executor(broker.store_executor, renew), timeout=lease
                )
            except StoreError as error:
                self.leadership.lose(str(error))
                return
            except TimeoutError:
                reason = f"the store did not answer for {lease:g} s (the lease)"
                store.abandon(reason)
                self.leadership.lose(reason)
                return
            renew = store.check_leadership
            await asyncio.sleep(self.config.ha.poll_interval)
