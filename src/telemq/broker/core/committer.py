"""Group commit: one store transaction per batch of work, acknowledgements after it.

Everything the broker must not lose is appended to `pending` (a `WriteBatch`);
everything that may only happen once those writes are durable (PUBACK, PUBREC,
PUBCOMP, handing QoS 2 messages to subscribers) is registered with `after`.
At the end of the event-loop iteration the pending batch is committed on the
writer thread while the loop keeps reading; the next batch accumulates
meanwhile and is committed as soon as the previous one is done. So the batch
size follows the load: one message per commit when idle, hundreds under
pressure. Callbacks run in registration order, which keeps acknowledgements in
receive order [MQTT-4.6.0-2].

Writes that nothing waits for (the journal rows of QoS 0 publications, $SYS and
command replies) are scheduled with `schedule_lazy`: they are committed within
`linger` seconds (`store.linger`; sooner when the caller says `within`), with
whatever else comes meanwhile, so a trickle of QoS 0 traffic costs one fsync per
`linger` instead of one per message. That matters beyond the fsync: every commit
on the writer thread disturbs the event loop a little (the GIL, the CPU), which
shows in the tail latency of everything else. Any `after` (an acknowledgement
waiting) commits them at once.

A batch of up to `INLINE_MAX_OPS` writes that several acknowledgements wait for is
committed on the event loop itself while such commits are quick (under `INLINE_BUDGET`
seconds on average, measured): handing it to the writer thread and its outcome back costs
two thread wake-ups (about 0.1 ms here), as much as the commit's own fsync, and those
clients can send nothing more until it ends. Overlapping the loop's work with the commit
does not win that back either: with the GIL, the loop and the writer mostly take turns
(QoS 1 and 2, windows of 25 to 100, one to four publishers: 6 to 33% more messages per CPU
second inline, docs/performance.md). A lone acknowledgement (a trickle, where another
client's message may arrive during the fsync), a large batch (many clients at once), a
lazy one and a slow disk keep going to the writer thread, so the loop keeps reading while
it works; the loop waits for an inline commit at most about `INLINE_BUDGET` on average.

A small read (EARLY_MIN_PACKETS to EARLY_MAX_PACKETS packets) of QoS 2 PUBLISHes or
PUBRELs (turns.py's `handle_read` says which reads) is answered in two halves while
commits on the loop are cheap (under EARLY_BUDGET on average: no flush to disk, `sync =
"normal"` or the memory store): the first half's writes are committed and acknowledged
(`answer_early`) before the second half is handled. Answering a whole read after one
commit makes the broker and a client with a small window take turns, each idle while the
other works (ten PUBRECs at once, then ten PUBRELs at once); with the first answers out
early the client works on them meanwhile (q2_w10 at `normal`: 20% more messages at the
same CPU a message, docs/performance.md). A commit that waits for the disk is not split:
each half would wait for it.

The memory store commits inline (there is nothing to wait for).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future

from ...store import Store, WriteBatch
from .stats import BATCH_BUCKETS, SECONDS_BUCKETS, Histogram

log = logging.getLogger("telemq.broker")

LINGER_MAX_OPS = 4096  # writes nobody waits for are committed at this many, or after linger
SEAL_INTERVAL = 0.01  # seconds between seals of the pending journal rows during a commit
MAX_BACKLOG = 100_000  # writes waiting behind a running commit before writers are paused
BACKLOG_SHARE = 16  # a writer with 1/16 of that in the waiting batch is one that fills it
INLINE_MIN_ACTIONS = 4  # a commit this many acknowledgements wait for...
INLINE_MAX_OPS = 512  # ...of a batch this small may run on the event loop...
INLINE_BUDGET = 0.002  # ...while such commits take less than this many seconds (average)
ACTIONS_PER_TURN = 1024  # post-commit actions run in one callback; the rest in later turns
EARLY_MIN_PACKETS = 8  # a read of this many packets...
EARLY_MAX_PACKETS = 64  # ...up to this many is answered in two halves...
EARLY_BUDGET = 0.0001  # ...while commits on the loop take less than this (seconds, average)


class WriteShare:
    """One writer's part (a client's) of the batch waiting behind the running commit:
    `Committer.charge` counts it, so that back-pressure pauses the writers that fill the
    backlog and not everyone who sends meanwhile."""

    __slots__ = ("batch", "writes")

    def __init__(self) -> None:
        self.batch = -1  # `Committer.batch` when `writes` were counted
        self.writes = 0


class Committer:
    __slots__ = (
        "_actions",
        "_busy",
        "_counted",
        "_draining",
        "_due",
        "_executor",
        "_inline_seconds",
        "_lazy",
        "_lazy_at",
        "_linger",
        "_loop",
        "_on_failure",
        "_ready",
        "_scheduled",
        "_sealing",
        "_send",
        "_store",
        "batch",
        "batch_ops",
        "commit_seconds",
        "commits",
        "on_commit",
        "pending",
        "sync_seconds",
    )

    def __init__(
        self,
        store: Store,
        loop: asyncio.AbstractEventLoop,
        executor: Executor | None,
        on_failure: Callable[[BaseException], None],
        linger: float = 0.5,
        send: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._loop = loop
        self._executor = executor
        self._on_failure = on_failure
        # Called after a commit's actions ran: the acknowledgements they queued are written
        # at once, not after the next round of reads.
        self._send = send
        self.pending = WriteBatch()
        self._actions: list[Callable[[], None]] = []
        # Actions of finished commits not run yet: ACTIONS_PER_TURN a turn of the loop, in
        # order, so that a commit a flood made does not hold every other client that long.
        self._ready: deque[Callable[[], None]] = deque()
        self._draining = False  # a `_drain` runs or is scheduled
        self._busy = False
        self._scheduled = False
        self._sealing = False
        self._lazy: asyncio.TimerHandle | None = None
        self._lazy_at = 0.0  # loop time `_lazy` fires at
        self._due: float | None = None  # loop time by which pending writes must be committed
        self._linger = linger
        self._inline_seconds = 0.0  # moving average of small commits' durations
        self.batch = 0  # the number of the pending batch (`charge`)
        self._counted = 0  # writes of the pending batch already charged to a writer
        self.commits = 0
        # For /metrics: every commit's duration, its sync's, and its size in write operations.
        self.commit_seconds = Histogram(SECONDS_BUCKETS)
        self.sync_seconds = Histogram(SECONDS_BUCKETS)
        self.batch_ops = Histogram(BATCH_BUCKETS)
        # Called after each commit while set: the broker resumes readers it paused.
        self.on_commit: Callable[[], None] | None = None

    @property
    def backlogged(self) -> bool:
        """So much waits behind the running commit that its writers should pause.

        Under a flood of QoS 0 publications the event loop keeps the GIL so busy that the
        writer thread falls behind, and the next batch would grow without bound. Pausing
        those who fill it until the commit ends bounds it, and lets the writer run.
        """
        return self._busy and len(self.pending) >= MAX_BACKLOG

    @property
    def busy(self) -> bool:
        """A commit runs on the writer thread: the pending batch waits behind it."""
        return self._busy

    def charge(self, share: WriteShare) -> bool:
        """Count the writes pending since the last charge as `share`'s; True when its
        writer should pause until the running commit ends.

        That is when the backlog is full (`backlogged`) and this writer made at least
        1/BACKLOG_SHARE of it, so one client's flood pauses that client only; or when it
        is twice full (many writers, none large), which pauses every writer. Called after
        each read while a commit runs, it costs one length of the batch, as `backlogged`.
        """
        size = len(self.pending)
        if share.batch != self.batch:
            share.batch = self.batch
            share.writes = 0
        share.writes += size - self._counted
        self._counted = size
        if not self._busy or size < MAX_BACKLOG:
            return False
        return share.writes * BACKLOG_SHARE >= MAX_BACKLOG or size >= 2 * MAX_BACKLOG

    @property
    def idle(self) -> bool:
        return not self._busy and not self.pending and not self._actions and not self._ready

    def after(self, action: Callable[[], None]) -> None:
        """Run `action` once everything written so far is durable."""
        # `pending` last: an interpreted `WriteBatch.__bool__`, often not needed.
        if not self._busy and not self._actions and not self.pending:
            if self._ready:
                self._ready.append(action)  # durable already: after the actions before it
            else:
                action()
            return
        self._actions.append(action)
        self.schedule()

    def early_answer_point(self, packets: int) -> int:
        """After how many of a read's `packets` to `answer_early`: half of a small read
        while commits are cheap (see the module docstring); 0: at the end only."""
        if (
            packets < EARLY_MIN_PACKETS
            or packets > EARLY_MAX_PACKETS
            or self._busy
            or self._inline_seconds >= EARLY_BUDGET
        ):
            return 0
        return packets // 2

    def answer_early(self) -> None:
        """Commit what waits for acknowledgement now, on the loop, and run its actions:
        the first half of a read is answered before the second is handled."""
        if self._actions and not self._busy:
            queued = self._scheduled
            self._flush()
            # The end-of-iteration commit the first half asked for is still queued: it takes
            # the second half, which need not queue another.
            self._scheduled = queued

    def schedule(self) -> None:
        """Commit what is pending at the end of this loop iteration."""
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def schedule_lazy(self, within: float | None = None) -> None:
        """Commit what is pending within `within` seconds (at most, and by default,
        `linger`), or sooner with whatever else is committed (see the module docstring)."""
        if within is not None or self._due is None:
            delay = self._linger if within is None else min(within, self._linger)
            due = self._loop.time() + delay
            if self._due is None or due < self._due:
                self._due = due
        if self._scheduled or self._busy:
            return  # a commit is coming anyway, or `_done` schedules one
        if len(self.pending) >= LINGER_MAX_OPS:
            self.schedule()  # bounded batches: the count is checked on every call
        elif self._lazy is None or self._lazy_at > self._due:
            if self._lazy is not None:
                self._lazy.cancel()
            self._lazy_at = self._due
            self._lazy = self._loop.call_at(self._due, self._flush)

    def _flush(self, on_loop: bool = True) -> None:
        """Commit what is pending; `on_loop=False` keeps it off the event loop's thread."""
        self._scheduled = False
        if self._lazy is not None:
            self._lazy.cancel()
            self._lazy = None
        if self._busy:
            if self.pending:
                self._due = 0.0  # overdue: `_done` has it committed next
            return
        if not self.pending and not self._actions:
            return
        batch, actions = self.pending, self._actions
        self.pending = WriteBatch()
        self.batch += 1
        self._counted = 0
        self._actions = []
        self._due = None
        if self._executor is None or (
            on_loop
            and len(actions) >= INLINE_MIN_ACTIONS
            and len(batch) <= INLINE_MAX_OPS
            and self._inline_seconds < INLINE_BUDGET
        ):
            try:
                if batch:
                    self._timed_commit(batch)
            except Exception as error:
                self._failed(error)
                return
            self.commits += 1
            self._run(actions)
            return
        self._busy = True
        # A plain executor future whose callback wakes the loop once: an asyncio future
        # (run_in_executor) would take two loop iterations to run `_done`.
        future = self._executor.submit(self._timed_commit, batch)
        future.add_done_callback(lambda done: self._call_done(done, actions))
        if not self._sealing:
            self._sealing = True
            self._loop.call_later(SEAL_INTERVAL, self._seal)

    def _timed_commit(self, batch: WriteBatch) -> None:
        """Commit, keeping the average duration of small commits (either thread)."""
        started = time.perf_counter()
        self._store.commit(batch)
        took = time.perf_counter() - started
        size = len(batch)
        if size <= INLINE_MAX_OPS:
            self._inline_seconds += (took - self._inline_seconds) * 0.125
        self.commit_seconds.observe(took)
        self.sync_seconds.observe(self._store.last_sync_seconds)
        self.batch_ops.observe(size)

    def _call_done(self, future: Future[None], actions: list[Callable[[], None]]) -> None:
        """On the writer thread: hand the outcome to the event loop."""
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody left to acknowledge
            self._loop.call_soon_threadsafe(self._done, future, actions)

    def _seal(self) -> None:
        """While the writer works, the next batch's journal rows go into sealed chunks
        (`WriteBatch.seal_journal`) so that the garbage collector does not scan them."""
        if self._busy:
            self.pending.seal_journal()
            self._loop.call_later(SEAL_INTERVAL, self._seal)
        else:
            self._sealing = False

    def _done(self, future: Future[None], actions: list[Callable[[], None]]) -> None:
        self._busy = False
        error = future.exception()
        if error is not None:
            self._failed(error)
            actions = []  # withheld: what they acknowledge is not durable
        else:
            self.commits += 1
        # The next batch goes to the writer before this one's actions run: the writer
        # works meanwhile, and what the actions write waits for the batch after it.
        # Actions still run in registration order: the next batch's run after its commit,
        # which is why that one is not committed on the loop right here.
        if self._actions:
            self._flush(on_loop=False)
        elif self.pending:
            self.schedule_lazy()
        if self.on_commit is not None:
            self.on_commit()
        self._run(actions)

    def _run(self, actions: list[Callable[[], None]]) -> None:
        """Run a finished commit's actions after those still waiting, ACTIONS_PER_TURN
        now and the rest in the next turns of the loop."""
        if not actions:
            return
        self._ready.extend(actions)
        if not self._draining:
            self._drain()

    def _drain(self) -> None:
        ready = self._ready
        self._draining = True
        ran = 0
        while ready and ran < ACTIONS_PER_TURN:
            action = ready.popleft()
            ran += 1
            try:
                action()
            except Exception:
                log.exception("error in a post-commit action")
        if ready:
            self._loop.call_soon(self._drain)  # `_draining` stays set until it has run
        else:
            self._draining = False
        if ran and self._send is not None:
            self._send()

    def _failed(self, error: BaseException) -> None:
        log.error("store commit failed, acknowledgements withheld: %s", error)
        self._on_failure(error)

    async def drain(self) -> None:
        """Wait until everything pending is committed (used at shutdown)."""
        while not self.idle:
            if not self._busy:
                self._flush()
            await asyncio.sleep(0.005)
