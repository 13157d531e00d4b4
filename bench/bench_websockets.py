"""MQTT over WebSockets against TCP (not a test): QoS 0 fan-in, measured in one run.

``python bench/bench_websockets.py [--publishers 4] [--seconds 5] [--reps 3] [--per-message 1]``

One telemq broker (SQLite, journal on, its defaults) with an HTTP listener. One subscriber
(TCP, QoS 0) on ``bench/ws/+`` counts what it receives; every PUBLISH of the run has the
same length, so it counts bytes and checks that they are whole frames. `--publishers`
publisher processes send 32-byte QoS 0 PUBLISHes to ``bench/ws/<i>`` as fast as their
connection takes them, over TCP (one ``send`` per PUBLISH) or over a WebSocket on ``/mqtt``
(one binary WebSocket message per PUBLISH, as browser clients send them; ``--per-message N``
puts N PUBLISHes in each message instead). After a warm-up second, the subscriber's rate
over ``--seconds`` is measured, with the broker's CPU. TCP and WebSocket runs alternate on
the same broker; the ratio is the median of the paired ratios, as in docs/performance.md.

Output: a Markdown table and ``KEY websockets: ws/tcp=<ratio>``.
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

from bench_network import HOST, cpu_seconds, free_port

from telemq.protocol.codec import encode, encode_publish
from telemq.protocol.packets import Connect, Subscribe


def frame(index: int) -> bytes:
    return encode_publish(f"bench/ws/{index}".encode(), b"x" * 32, 0, False, False, 0)


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    port, http_port = free_port(), free_port()
    command = [
        sys.executable, "-m", "telemq", "serve", "--host", HOST, "--port", str(port),
        "--http-port", str(http_port), "--data-dir", str(workdir / "data"),
        "--log-level", "warning",
    ]  # fmt: skip
    broker = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with (
                socket.create_connection((HOST, http_port), timeout=0.5),
                socket.create_connection((HOST, port), timeout=0.5),
            ):
                return broker, port, http_port
        except OSError:
            time.sleep(0.05)
    broker.kill()
    raise RuntimeError("the broker did not start")


def publish_tcp(port: int, index: int, stop: Event) -> None:
    data = frame(index)
    with socket.create_connection((HOST, port)) as sock:
        sock.sendall(encode(Connect(f"bench-tcp-{index}-{os.getpid()}")))
        sock.recv(4)  # CONNACK
        while not stop.is_set():
            for _ in range(200):
                sock.sendall(data)


def publish_ws(http_port: int, index: int, stop: Event, per_message: int) -> None:
    import aiohttp

    data = frame(index) * per_message

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            url = f"http://{HOST}:{http_port}/mqtt"
            async with session.ws_connect(url, protocols=("mqtt",), compress=0) as ws:
                await ws.send_bytes(encode(Connect(f"bench-ws-{index}-{os.getpid()}")))
                await ws.receive()  # CONNACK
                while not stop.is_set():
                    for _ in range(200):
                        await ws.send_bytes(data)

    asyncio.run(run())


def subscribe(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port))
    sock.sendall(encode(Connect(f"bench-sub-{os.getpid()}")))
    sock.recv(4)
    sock.sendall(encode(Subscribe(1, [("bench/ws/+", 0)])))
    sock.recv(5)  # SUBACK
    sock.setblocking(False)
    return sock


def count_for(sock: socket.socket, seconds: float) -> int:
    """Bytes received within `seconds`."""
    total = 0
    deadline = time.monotonic() + seconds
    sock.settimeout(0.05)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not chunk:
            raise RuntimeError("the broker closed the subscriber")
        total += len(chunk)
    return total


def run_once(
    broker: subprocess.Popen[bytes],
    port: int,
    http_port: int,
    kind: str,
    args: argparse.Namespace,
) -> tuple[float, float]:
    """(delivered messages per second, broker cores) of one run."""
    size = len(frame(0))
    sub = subscribe(port)
    stop = multiprocessing.Event()
    if kind == "tcp":
        targets = [(publish_tcp, (port, i, stop)) for i in range(args.publishers)]
    else:
        targets = [
            (publish_ws, (http_port, i, stop, args.per_message)) for i in range(args.publishers)
        ]
    processes = [multiprocessing.Process(target=t, args=a, daemon=True) for t, a in targets]
    for process in processes:
        process.start()
    count_for(sub, 1.0)  # warm-up
    cpu0 = cpu_seconds(broker.pid)
    received = count_for(sub, args.seconds)
    cores = (cpu_seconds(broker.pid) - cpu0) / args.seconds
    stop.set()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
    sub.close()
    time.sleep(0.5)  # the broker finishes with the publishers' last bytes
    return received / size / args.seconds, cores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--per-message", type=int, default=1)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"tcp": [], "ws": []}
    cores: dict[str, list[float]] = {"tcp": [], "ws": []}
    ratios = []
    with tempfile.TemporaryDirectory(prefix="telemq-bench-ws-") as tmp:
        broker, port, http_port = start_broker(Path(tmp))
        try:
            for _ in range(args.reps):
                pair = {}
                for kind in ("tcp", "ws"):
                    rate, used = run_once(broker, port, http_port, kind, args)
                    rates[kind].append(rate)
                    cores[kind].append(used)
                    pair[kind] = rate
                    print(f"  {kind}: {rate:,.0f} msg/s, broker {used:.2f} cores", flush=True)
                ratios.append(pair["ws"] / pair["tcp"])
        finally:
            broker.terminate()
            broker.wait(10)
    print()
    print("| transport | delivered msg/s (median) | broker cores (median) |")
    print("| --- | --- | --- |")
    for kind, name in (("tcp", "TCP"), ("ws", "WebSocket")):
        print(
            f"| {name} | {statistics.median(rates[kind]):,.0f} | "
            f"{statistics.median(cores[kind]):.2f} |"
        )
    print()
    print(f"KEY websockets: ws/tcp={statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
