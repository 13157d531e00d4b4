"""Fan-out over linked brokers (not a test): the same subscribers on one broker, or spread
over two or three linked brokers, fed by one publisher (docs/network.md §14).

``python bench/bench_network.py [--brokers 1,2,3] [--subscribers 20] [--seconds 5] [--reps 3]``

Each run starts fresh brokers (SQLite, journal on, temporary data directories): A alone; A
and B with B dialing A; or the chain A - B - C, C dialing B. One publisher process at A
sends QoS 0 PUBLISHes on `bench/t` (32-byte payload) as fast as its socket takes them; one
subscriber process per broker of the largest run holds its share of the subscribers (with
fewer brokers, the same processes connect to A, or to A and B), each subscribed to
`bench/t` at QoS 0. Every QoS 0 PUBLISH on that topic has the same length, so
the subscribers count bytes (whole frames, checked at the end), which leaves the CPU to the
brokers. After a warm-up second, the delivered messages per second over `--seconds` are
measured, with each broker's CPU seconds (`/proc`). Runs of one and two brokers alternate;
each ratio to one broker is the median of the paired ratios, as in docs/performance.md.

QoS 0 is dropped for a subscriber that is not reading (as Mosquitto does), so the delivered
rate is what the brokers can push: the fan-out capacity. Output: a Markdown table and
``KEY network: fanout2/fanout1=... fanout3/fanout1=...``. The latency each hop adds is
`bench_network_latency.py`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path

from telemq.broker.security.passwords import hash_password
from telemq.protocol.codec import encode, encode_publish
from telemq.protocol.packets import Connect, Subscribe

HOST = "127.0.0.1"
TOPIC = b"bench/t"
FRAME = encode_publish(TOPIC, b"x" * 32, 0, False, False, 0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker(workdir: Path, name: str, port: int, links: str) -> subprocess.Popen[bytes]:
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "telemq.toml"
    digest = hash_password("secret", iterations=1000)
    config.write_text(
        f'name = "{name}"\nallow_anonymous = true\n[sys]\ninterval = 0\n'
        f'[[users]]\nname = "link"\npassword_hash = "{digest}"\n{links}\n'
        f'[[listeners]]\nhost = "{HOST}"\nport = {port}\n'
    )
    command = [sys.executable, "-m", "telemq", "serve", "--config", str(config)]
    command += ["--data-dir", str(workdir / "data"), "--log-level", "warning"]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"broker {name} did not start")


def subscribers(
    port: int, count: int, ready: Event, start: Event, stop: Event, results: object
) -> None:
    """A process holding `count` QoS 0 subscribers on `port`; puts (frames in the window,
    stray bytes) on `results` when `stop` is set."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        received = [0]
        readers: list[asyncio.StreamReader] = []
        for n in range(count):
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(encode(Connect(f"sub{os.getpid()}-{n}", keepalive=600)))
            writer.write(encode(Subscribe(1, [(TOPIC.decode(), 0)])))
            await reader.readexactly(4 + 5)  # CONNACK, SUBACK
            readers.append(reader)

        async def read(reader: asyncio.StreamReader) -> None:
            while data := await reader.read(1 << 16):
                received[0] += len(data)

        tasks = [loop.create_task(read(reader)) for reader in readers]
        ready.set()
        while not start.is_set():
            await asyncio.sleep(0.005)
        at_start = received[0]
        while not stop.is_set():
            await asyncio.sleep(0.005)
        window = received[0] - at_start
        results.put((window // len(FRAME), window % len(FRAME)))  # type: ignore[attr-defined]
        for task in tasks:
            task.cancel()

    asyncio.run(main())


def publisher(port: int, stop: Event) -> None:
    with socket.create_connection((HOST, port)) as sock:
        sock.sendall(encode(Connect("bench-publisher", keepalive=600)))
        sock.recv(4)
        batch = FRAME * 64
        while not stop.is_set():
            sock.sendall(batch)


def start_chain(base: Path, names: str) -> tuple[dict[str, int], list[subprocess.Popen[bytes]]]:
    """Fresh brokers `names` (a prefix of "ABC") linked as the chain A - B - C, each dialing
    the one before it; returns their ports and processes."""
    ports: dict[str, int] = {}
    for name in names:  # distinct: a port just released may be handed out again
        port = free_port()
        while port in ports.values():
            port = free_port()
        ports[name] = port

    def dial(neighbour: str) -> str:
        return (
            f'[[links]]\nname = "{neighbour}"\nhost = "{HOST}"\nport = {ports[neighbour]}\n'
            'username = "link"\npassword = "secret"\n'
        )

    def accept(neighbour: str) -> str:
        return f'[[links]]\nname = "{neighbour}"\nuser = "link"\n' if neighbour in names else ""

    links = {
        "A": lambda: accept("B"),
        "B": lambda: dial("A") + accept("C"),
        "C": lambda: dial("B"),
    }
    return ports, [start_broker(base / name, name, ports[name], links[name]()) for name in names]


def run(
    brokers: int, total_subscribers: int, seconds: float, base: Path, processes_count: int
) -> dict[str, float]:
    names = "ABC"[:brokers]
    ports, processes = start_chain(base, names)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    start, stop, stop_publisher = context.Event(), context.Event(), context.Event()
    workers = []
    for index in range(processes_count):
        port = ports[names[index % brokers]]
        ready = context.Event()
        share = total_subscribers // processes_count + (
            total_subscribers % processes_count if index == 0 else 0
        )
        worker = context.Process(
            target=subscribers, args=(port, share, ready, start, stop, results)
        )
        worker.start()
        workers.append((worker, ready))
    try:
        for _, ready in workers:
            if not ready.wait(30):
                raise RuntimeError("subscribers did not connect")
        time.sleep(1.5 * brokers)  # the proxy subscriptions reach A
        sender = context.Process(target=publisher, args=(ports["A"], stop_publisher))
        sender.start()
        time.sleep(1.0)  # warm-up
        cpu_before = [cpu_seconds(p.pid) for p in processes]
        start.set()
        began = time.monotonic()
        time.sleep(seconds)
        stop.set()
        elapsed = time.monotonic() - began
        cpu = [cpu_seconds(p.pid) - before for p, before in zip(processes, cpu_before, strict=True)]
        counts = [results.get(timeout=30) for _ in workers]
        stop_publisher.set()
        sender.join(10)
        if any(stray for _, stray in counts):
            raise RuntimeError(f"frames of an unexpected length arrived: {counts}")
        if brokers > 1 and min(frames for frames, _ in counts) == 0:
            raise RuntimeError("nothing crossed a link: is it up?")
        delivered = sum(frames for frames, _ in counts) / elapsed
        return {"delivered": delivered, "cpu": sum(cpu), "per_cpu": delivered * elapsed / sum(cpu)}
    finally:
        for worker, _ in workers:
            worker.join(10)
            if worker.is_alive():
                worker.kill()
        for process in processes:
            process.terminate()
            process.wait(20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="1,2,3")
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    counts = [int(n) for n in args.brokers.split(",")]
    if not set(counts) <= {1, 2, 3}:
        parser.error("--brokers takes 1, 2 and/or 3")
    table: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory(prefix="telemq-bench-network-") as tmp:
        for rep in range(args.reps):
            for n in counts if rep % 2 == 0 else reversed(counts):
                base = Path(tmp) / f"r{rep}n{n}"
                result = run(n, args.subscribers, args.seconds, base, max(counts))
                table[n].append(result)
                print(f"rep {rep} brokers {n}: {result['delivered']:,.0f} msg/s", flush=True)
    print("\n| brokers | delivered msg/s (median) | broker CPU s | deliveries per CPU s |")
    print("| --- | --- | --- | --- |")
    for n in counts:
        rows = table[n]
        print(
            f"| {n} | {statistics.median(r['delivered'] for r in rows):,.0f} "
            f"| {statistics.median(r['cpu'] for r in rows):.2f} "
            f"| {statistics.median(r['per_cpu'] for r in rows):,.0f} |"
        )
    if 1 in counts and len(counts) > 1:
        keys = []
        for n in counts:
            if n == 1:
                continue
            pairs = zip(table[1], table[n], strict=True)
            ratios = [many["delivered"] / one["delivered"] for one, many in pairs]
            keys.append(
                f"fanout{n}/fanout1={statistics.median(ratios):.3f} "
                f"(runs: {', '.join(f'{r:.2f}' for r in ratios)})"
            )
        print(f"\nKEY network: {' '.join(keys)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
