"""Housekeeping: what happens because time passes, not because a client sent something.

Theory of operation
-------------------
Two loops on the event loop. Once a second, the subscriptions and retained messages whose
MQ expiry has passed are removed (RegSub and Publish `<mqmd><Expiry>`), and so are the
disconnected sessions whose MQTT 5.0 Session Expiry Interval has passed. Every
`journal.retention_interval` seconds, when the journal has a `max_rows` or `max_age`, it is
trimmed, never past what a running pipeline query has committed (its record under
`<data_dir>/pipeline-commits`, or the offset it committed to the journal service). The trim
runs on the store's thread, after any commit in progress, so it never races one. A failure
is logged and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor

from ...store import Store, consumers
from ..core.retained import RetainedMessages
from ..core.router import now_us
from ..core.stats import BrokerStats
from ..core.subscribe import SubscriptionManager
from ..settings.config import BrokerConfig

log = logging.getLogger("telemq.broker")


class Housekeeping:
    """The expiry and journal retention loops (see module docstring)."""

    def __init__(
        self,
        config: BrokerConfig,
        store: Store,
        executor: Executor | None,
        stats: BrokerStats,
        subscriptions: SubscriptionManager,
        retained: RetainedMessages,
        next_seq: Callable[[], int],
        expire_sessions: Callable[[float], int],
    ) -> None:
        self._config = config
        self._store = store
        self._executor = executor
        self._stats = stats
        self._subscriptions = subscriptions
        self._retained = retained
        self._next_seq = next_seq
        self._expire_sessions = expire_sessions
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._tasks.append(loop.create_task(self._expiry_loop()))
        journal = self._config.journal
        if journal.enabled and (journal.max_age or journal.max_rows):
            self._tasks.append(loop.create_task(self._retention_loop()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def expire(self, now: float) -> None:
        self._subscriptions.expire(now)
        self._retained.expire(now)
        self._expire_sessions(now)

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                self.expire(time.time())
            except Exception:
                log.exception("housekeeping failed")

    async def _retention_loop(self) -> None:
        interval = self._config.journal.retention_interval
        while True:
            await asyncio.sleep(interval)
            try:
                await self.apply_journal_retention()
            except Exception:
                log.exception("journal retention failed")

    async def apply_journal_retention(self) -> int:
        """Trim the journal to `max_rows` and `max_age` (see module docstring)."""
        journal = self._config.journal
        store = self._store
        data_dir = self._config.store.data_dir

        def trim() -> tuple[int, int]:
            next_seq = self._next_seq()
            before = 0  # delete seq < before
            if journal.max_rows:
                before = next_seq - journal.max_rows
            if journal.max_age:
                since = store.journal_seq_since(now_us() - int(journal.max_age * 1e6))
                before = max(before, next_seq if since is None else since)
            floors = (
                consumers.retention_floor(data_dir),  # readers of the store file
                consumers.offsets_floor(store.consumer_offsets()),  # readers over the network
            )
            for floor in floors:
                if floor is not None:
                    before = min(before, floor + 1)  # floor: the largest seq all have processed
            return (store.trim_journal(before) if before > 1 else 0), before

        if self._executor is not None:
            loop = asyncio.get_running_loop()
            trimmed, before = await loop.run_in_executor(self._executor, trim)
        else:
            trimmed, before = trim()
        if trimmed:
            self._stats.journal_trimmed += trimmed
            log.info("journal retention: %d rows deleted", trimmed)
        else:
            log.debug("journal retention: nothing to delete before seq %d", before)
        return trimmed
