"""Store benchmark (not a test): the PostgreSQL store beside SQLite, end to end, and the
takeover time of an `[ha]` pair; or, with ``--commits``, a store's own commits/s.

``python bench/bench_store.py [--kinds sqlite,postgres] [--seconds 3] [--workloads ...]
[--rounds 1] [--kills 5] [--inline-budget S]``

End to end, for each store kind a fresh ``telemq serve`` (``sync = "full"`` unless ``--sync``
says otherwise, journal on) on a
fresh store (a temporary SQLite file; a new database on a PostgreSQL server that the bench
starts as the tests do, tests/testsupport/postgres.py, from Debian's ``postgresql``), driven
over loopback by bench_broker.py's clients (telemq's own codec, every message checked):

- ``fanin``: 16 publishers -> 1 subscriber, QoS 1, a window of 10 messages each;
- ``qos1-w10``, ``qos1-w100``, ``qos2-w10``, ``qos2-w100``: 4 publishers -> 1 subscriber at
  that QoS, with that window per publisher (QoS 2 publishers keep persistent sessions);
- ``retained``: one publisher sets 1,000 retained messages (QoS 1, distinct topics, window
  100): msgs/s; then a new subscriber gets them all: msgs/s of that delivery;
- ``connect``: persistent sessions (clean session 0) connecting and disconnecting, 8 at a
  time: connects/s (each CONNECT and DISCONNECT writes the session);
- ``takeover`` (PostgreSQL only): an active member and a standby (`[ha]`, ``poll_interval
  = 0.2``) with 200 persistent sessions in the store; the active member is SIGKILLed
  `--kills` times (and started again as the standby): seconds from the kill to the first
  CONNACK 0 from the new active member, median and p95.

The last lines give postgres / sqlite per workload; the goal for ``qos1-w100`` is 0.5 or more.
With ``--rounds N`` each workload runs N times per kind, the kinds alternately (the even
rounds in reverse order), and the ratio is given as the median and range of the rounds'
ratios; beside it the ratio of messages per CPU-second (the broker's, plus the PostgreSQL
server's processes for PostgreSQL), which a loaded machine disturbs much less than the
rates. Each line gives the machine's load average: compare figures of similar loads.

``--inline-budget S`` starts the brokers with the committer's `INLINE_BUDGET` set to S
seconds (0: no commit on the event loop; 1: every small batch that several acknowledgements
wait for), to measure what committing them on the event loop does per store
(docs/postgres.md, "Speed"). It patches the modules
before the broker starts, so run from a checkout with ``PYTHONPATH=src`` (a compiled build
may not see it).

Store level (``--commits``, the store alone, no broker): commits/s and messages/s per sync
mode and batch size: ``qos1`` (one journal append per message) and ``persistent`` (journal,
message and delivery per message, then a batch deleting the deliveries and messages, as
the subscriber's PUBACKs would; its commits/s counts both batches).

The clients are Python too, so on a small machine they share the CPU with the broker and the
database: compare runs made on the same machine, at the same time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_broker import broker_cpu_seconds, connect, run_load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from telemq.protocol.codec import encode, encode_publish
from telemq.protocol.packets import Disconnect, PubAck, Publish, SubAck, Subscribe
from telemq.store import (
    DeliveryRecord,
    JournalRecord,
    MemoryStore,
    SqliteStore,
    Store,
    StoredMessage,
    SyncMode,
    WriteBatch,
)
from testsupport.postgres import PostgresServer, start_server
from testsupport.process import BrokerProcess, connack_code, free_port

WORKLOADS = ("fanin", "qos1-w10", "qos1-w100", "qos2-w10", "qos2-w100", "retained", "connect")
RETAINED = 1_000  # within a session's queue (max_queued_messages) and its in-flight window
CONNECTING = 8
TAKEOVER_SESSIONS = 200
POLL = 0.2  # [ha] poll_interval of the takeover pair

# -- brokers -------------------------------------------------------------------------------


class BenchBroker(BrokerProcess):
    """A `telemq serve` whose committer's INLINE_BUDGET is `inline_budget` when given."""

    def __init__(
        self,
        workdir: Path,
        config_text: str,
        inline_budget: float | None,
        ports: tuple[int, ...] = (),
    ) -> None:
        super().__init__(
            workdir, config_text=config_text, args=["--log-level", "warning"], ports=ports
        )
        self.inline_budget = inline_budget

    def command(self) -> list[str]:
        command = super().command()
        if self.inline_budget is None:
            return command
        patch = (
            "import sys; import telemq.broker.core.committer as c;"
            " c.INLINE_BUDGET = float(sys.argv.pop(1));"
            " from telemq.cli.main import main; sys.exit(main(sys.argv[1:]))"
        )
        return [command[0], "-c", patch, str(self.inline_budget), *command[3:]]


SYNC = "full"  # the brokers' [store] sync (--sync)


def store_text(kind: str, server: PostgresServer | None, workdir: Path) -> str:
    """The `[store]` table of a fresh store of `kind` (a new database on `server`)."""
    if kind == "sqlite":
        return f'[store]\nkind = "sqlite"\nsync = "{SYNC}"\n'
    assert server is not None
    secret = workdir / "pg.password"
    secret.write_text(server.password + "\n", encoding="utf-8")
    dsn = server.dsn(server.create_database(), password=False)
    return (
        f'[store]\nkind = "postgres"\ndsn = "{dsn}"\npassword_file = "{secret}"\nsync = "{SYNC}"\n'
    )


@contextmanager
def broker(
    kind: str, server: PostgresServer | None, inline_budget: float | None
) -> Iterator[BenchBroker]:
    with tempfile.TemporaryDirectory(prefix="telemq-bench-") as tmp:
        workdir = Path(tmp)
        process = BenchBroker(workdir, store_text(kind, server, workdir), inline_budget)
        process.start()
        try:
            yield process
        finally:
            process.finalize()


# -- workloads -----------------------------------------------------------------------------


def load(port: int, qos: int, publishers: int, window: int, seconds: float) -> float:
    """msgs/s received by the subscriber of bench_broker's `run_load`; raises on a loss."""
    sent, elapsed, tally = asyncio.run(
        run_load(port, qos, publishers, window, seconds, persistent=qos == 2)
    )
    if sent != tally.received or (qos == 2 and tally.duplicates):
        raise RuntimeError(f"lost {sent - tally.received}, {tally.duplicates} duplicates")
    return tally.received / elapsed


async def retained(port: int) -> tuple[float, float]:
    """(retained messages set per second, retained messages delivered per second)."""
    run = uuid.uuid4().hex[:8]
    publisher = await connect(port, f"ret-{run}")
    acked = 0
    window = asyncio.Semaphore(100)
    done = asyncio.Event()

    def on_ack(packet: object) -> None:
        nonlocal acked
        if isinstance(packet, PubAck):
            acked += 1
            window.release()
            if acked == RETAINED:
                done.set()

    publisher.on_packet = on_ack
    started = time.monotonic()
    for index in range(RETAINED):
        await window.acquire()
        topic = f"bench/{run}/r/{index}".encode()
        publisher.send(encode_publish(topic, b"x" * 32, 1, True, False, index % 65535 + 1))
    await asyncio.wait_for(done.wait(), 120)
    set_rate = RETAINED / (time.monotonic() - started)
    subscriber = await connect(port, f"ret-sub-{run}")
    got = 0
    all_in = asyncio.Event()

    def on_message(packet: object) -> None:
        nonlocal got
        if isinstance(packet, Publish) and packet.retain:
            got += 1
            if packet.qos:
                subscriber.send(encode(PubAck(packet.packet_id)))
            if got == RETAINED:
                all_in.set()

    subscriber.on_packet = on_message
    started = time.monotonic()
    subscriber.send(encode(Subscribe(1, [(f"bench/{run}/r/#", 1)])))
    await asyncio.wait_for(all_in.wait(), 120)
    get_rate = RETAINED / (time.monotonic() - started)
    for peer in (publisher, subscriber):
        assert peer.transport is not None
        peer.transport.close()
    return set_rate, get_rate


async def connects(port: int, seconds: float) -> float:
    """Persistent sessions connecting and disconnecting, `CONNECTING` at a time: per second."""
    run = uuid.uuid4().hex[:8]
    count = 0
    stop_at = time.monotonic() + seconds

    async def one(worker: int) -> None:
        nonlocal count
        index = 0
        while time.monotonic() < stop_at:
            peer = await connect(port, f"c-{run}-{worker}-{index % 50}", clean=False)
            peer.send(encode(Disconnect()))
            assert peer.transport is not None
            peer.transport.close()
            count += 1
            index += 1

    started = time.monotonic()
    await asyncio.gather(*(one(worker) for worker in range(CONNECTING)))
    return count / (time.monotonic() - started)


def run_workload(name: str, port: int, seconds: float) -> str:
    """One workload against the broker on `port`: its figures, formatted."""
    if name == "fanin":
        return f"{load(port, 1, 16, 10, seconds):,.0f} msgs/s"
    if name.startswith("qos"):
        qos, window = name[3], name.split("-w")[1]
        return f"{load(port, int(qos), 4, int(window), seconds):,.0f} msgs/s"
    if name == "retained":
        set_rate, get_rate = asyncio.run(retained(port))
        return f"{set_rate:,.0f} msgs/s set, {get_rate:,.0f} msgs/s to a new subscriber"
    if name == "connect":
        return f"{asyncio.run(connects(port, seconds)):,.0f} connects/s"
    raise ValueError(f"unknown workload {name!r}")


# -- takeover ------------------------------------------------------------------------------


def first_accepted(ports: list[int], deadline: float) -> float:
    """Poll `ports` with CONNECTs until one answers CONNACK 0: that moment (monotonic)."""
    while time.monotonic() < deadline:
        for port in ports:
            if connack_code(port, timeout=1.0) == 0:
                return time.monotonic()
        time.sleep(0.005)
    raise RuntimeError("no member accepted a CONNECT in time")


def takeovers(server: PostgresServer, kills: int, inline_budget: float | None) -> list[float]:
    """Seconds from each SIGKILL of the active member to the new one's first CONNACK 0."""
    with tempfile.TemporaryDirectory(prefix="telemq-bench-ha-") as tmp:
        workdir = Path(tmp)
        store = store_text("postgres", server, workdir)
        ports = {name: free_port() for name in ("a", "b")}
        members: dict[str, BenchBroker] = {}
        for name in ports:
            text = (
                f'[ha]\nenabled = true\nmember = "{name}"\npoll_interval = {POLL}\n'
                f"rejoin_delay = 1.0\n{store}"
            )
            members[name] = BenchBroker(workdir / name, text, inline_budget, (ports[name],))
        try:
            members["a"].start()
            members["b"].start()
            asyncio.run(persistent_sessions(ports["a"]))
            active, standby = "a", "b"
            times: list[float] = []
            for _ in range(kills):
                killed_at = time.monotonic()
                members[active].kill()
                accepted = first_accepted([ports[standby]], killed_at + 60)
                times.append(accepted - killed_at)
                members[active].start()  # back, as the standby
                active, standby = standby, active
            return times
        finally:
            for member in members.values():
                member.finalize()


async def persistent_sessions(port: int) -> None:
    """`TAKEOVER_SESSIONS` persistent sessions with a subscription each: state to load."""
    for index in range(TAKEOVER_SESSIONS):
        peer = await connect(port, f"state-{index}", clean=False)
        peer.send(encode(Subscribe(1, [(f"state/{index}/#", 1)])))
        assert isinstance(await asyncio.wait_for(peer.packets.get(), 10), SubAck)
        peer.send(encode(Disconnect()))
        assert peer.transport is not None
        peer.transport.close()


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


# -- store level (--commits) ---------------------------------------------------------------

Workload = Callable[[Store, int, int, bytes], int]  # (store, first id, size, payload) -> commits


def qos1(store: Store, first: int, size: int, payload: bytes) -> int:
    batch = WriteBatch()
    for seq in range(first, first + size):
        batch.append_journal(
            JournalRecord(seq, seq, "sensors/a/temp", "", 1, False, payload, "pub", "user")
        )
    store.commit(batch)
    return 1


def persistent(store: Store, first: int, size: int, payload: bytes) -> int:
    publish = WriteBatch()
    ids = range(first, first + size)
    for i in ids:
        publish.append_journal(
            JournalRecord(i, i, "sensors/a/temp", "", 1, False, payload, "pub", "user")
        )
        publish.put_message(
            StoredMessage(i, "sensors/a/temp", payload, 1, False, "", "pub", "user", i)
        )
        publish.put_delivery(DeliveryRecord(i, "subscriber", i, 1))
    store.commit(publish)
    acks = WriteBatch()
    for i in ids:
        acks.delete_delivery(i)
        acks.delete_message(i)
    store.commit(acks)
    return 2


STORE_WORKLOADS: dict[str, Workload] = {"qos1": qos1, "persistent": persistent}


def open_bench_store(kind: str, mode: SyncMode, tmp: str, server: PostgresServer | None) -> Store:
    if kind == "sqlite":
        return SqliteStore(Path(tmp) / "telemq.db", mode)
    if kind == "postgres":
        from telemq.store.postgres import PostgresStore

        assert server is not None
        return PostgresStore(server.dsn(server.create_database()), mode)
    return MemoryStore()


def measure(
    kind: str,
    mode: SyncMode,
    workload: Workload,
    size: int,
    payload: bytes,
    seconds: float,
    server: PostgresServer | None,
) -> tuple[float, float]:
    """(commits/s, messages/s) of one workload on a fresh store."""
    with tempfile.TemporaryDirectory(prefix="telemq-bench-") as tmp:
        store = open_bench_store(kind, mode, tmp, server)
        try:
            store.load()
            commits = messages = 0
            next_id = 1
            start = time.perf_counter()
            deadline = start + seconds
            while time.perf_counter() < deadline:
                commits += workload(store, next_id, size, payload)
                next_id += size
                messages += size
            elapsed = time.perf_counter() - start
        finally:
            store.close()
    return commits / elapsed, messages / elapsed


def commits_table(args: argparse.Namespace, server: PostgresServer | None) -> None:
    modes = [SyncMode(m) for m in args.modes.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    payload = os.urandom(args.payload)
    print(
        f"telemq store benchmark: {args.kind} (SQLite {sqlite3.sqlite_version}),"
        f" payload {args.payload} B, {args.seconds:g} s per line, dir {tempfile.gettempdir()}"
    )
    print(f"{'sync':<8}{'workload':<12}{'batch':>6}{'commits/s':>12}{'messages/s':>13}")
    for mode in modes if args.kind != "memory" else [SyncMode.OFF]:
        for name in args.store_workloads.split(","):
            for size in sizes:
                commits, messages = measure(
                    args.kind, mode, STORE_WORKLOADS[name], size, payload, args.seconds, server
                )
                label = mode.value if args.kind != "memory" else "-"
                print(f"{label:<8}{name:<12}{size:>6}{commits:>12,.0f}{messages:>13,.0f}")


# -- main ------------------------------------------------------------------------------------


def server_cpu_seconds(server: PostgresServer | None) -> float:
    """CPU seconds of the PostgreSQL server: the postmaster and every process it started
    (the broker's backend, the WAL writer, the checkpointer...); 0 without a server."""
    if server is None:
        return 0.0
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    total = broker_cpu_seconds(postmaster)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == postmaster:
                total += broker_cpu_seconds(int(entry.name))
        except (OSError, ValueError):
            continue  # a process that ended meanwhile
    return total


def spread(values: list[float]) -> str:
    """Median and range: ``0.52 [0.47-0.58]``."""
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def load_average() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def end_to_end(args: argparse.Namespace, server: PostgresServer | None) -> None:
    """Each workload `--rounds` times, the kinds alternately (ABBA: the second round runs
    them in the reverse order), so that a change of the machine's load meets both."""
    kinds = args.kinds.split(",")
    workloads = [w for w in args.workloads.split(",") if w != "takeover"]
    budget = "default" if args.inline_budget is None else f"{args.inline_budget:g} s"
    print(
        f"telemq store benchmark, end to end: {', '.join(kinds)}; {args.seconds:g} s per run,"
        f" {args.rounds} round(s), sync = {SYNC}, journal on, INLINE_BUDGET {budget};"
        f" {load_average()}"
    )
    # (workload, kind) -> per round: (rate, rate per CPU-second of broker + database server)
    rates: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for name in workloads:
        for round_ in range(args.rounds):
            for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
                db = server if kind == "postgres" else None
                with broker(kind, server, args.inline_budget) as process:
                    assert process.proc is not None
                    cpu = broker_cpu_seconds(process.proc.pid) + server_cpu_seconds(db)
                    started = time.monotonic()
                    figures = run_workload(name, process.port, args.seconds)
                    elapsed = time.monotonic() - started
                    cpu = broker_cpu_seconds(process.proc.pid) + server_cpu_seconds(db) - cpu
                rate = float(figures.split()[0].replace(",", ""))
                per_cpu = rate * elapsed / max(cpu, 1e-9)
                rates.setdefault((name, kind), []).append((rate, per_cpu))
                print(
                    f"{name:<11}{kind:<9}{figures}; {per_cpu:,.0f} per CPU-second"
                    f" (broker + database server); {load_average()}",
                    flush=True,
                )
    if "sqlite" in kinds and "postgres" in kinds:
        for name in workloads:
            pairs = list(zip(rates[(name, "postgres")], rates[(name, "sqlite")], strict=True))
            ratios = [pg[0] / max(lite[0], 1e-9) for pg, lite in pairs]
            cpu_ratios = [pg[1] / max(lite[1], 1e-9) for pg, lite in pairs]
            goal = "  (goal >= 0.5)" if name == "qos1-w100" else ""
            print(
                f"{name:<11}postgres/sqlite {spread(ratios)}{goal};"
                f" per CPU-second {spread(cpu_ratios)}"
            )
    print(f"end: {load_average()}")
    if "takeover" in args.workloads.split(",") and server is not None:
        times = takeovers(server, args.kills, args.inline_budget)
        print(
            f"takeover   postgres {len(times)} kills, {TAKEOVER_SESSIONS} sessions:"
            f" median {statistics.median(times):.2f} s, p95 {p95(times):.2f} s"
            f" (SIGKILL to the first CONNACK 0, poll_interval {POLL:g} s)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="run time per measurement")
    parser.add_argument("--kinds", default="sqlite,postgres", help="store kinds, end to end")
    parser.add_argument("--workloads", default=",".join((*WORKLOADS, "takeover")))
    parser.add_argument("--rounds", type=int, default=1, help="runs per workload and kind")
    parser.add_argument("--kills", type=int, default=5, help="takeovers to time")
    parser.add_argument("--inline-budget", type=float, default=None, help="seconds; 0: off")
    parser.add_argument("--sync", choices=("full", "normal", "off"), default="full")
    parser.add_argument("--commits", action="store_true", help="the store alone: commits/s")
    parser.add_argument("--kind", choices=("sqlite", "postgres", "memory"), default="sqlite")
    parser.add_argument("--modes", default="full,normal,off", help="--commits: sync modes")
    parser.add_argument("--sizes", default="1,10,100", help="--commits: messages per batch")
    parser.add_argument("--store-workloads", default="qos1,persistent", help="--commits")
    parser.add_argument("--payload", type=int, default=64, help="--commits: payload bytes")
    args = parser.parse_args()
    global SYNC
    SYNC = args.sync
    wanted = set(args.workloads.split(",")) - {*WORKLOADS, "takeover"}
    if wanted:
        parser.error(f"unknown workloads: {', '.join(sorted(wanted))}")
    uses_postgres = args.kind == "postgres" if args.commits else "postgres" in args.kinds.split(",")
    server = start_server() if uses_postgres else None
    try:
        if args.commits:
            commits_table(args, server)
        else:
            end_to_end(args, server)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
