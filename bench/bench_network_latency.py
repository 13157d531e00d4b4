"""Latency added per hop of a network of brokers (not a test; docs/network.md §14).

``python bench/bench_network_latency.py [--messages 2000] [--rate 500] [--qos 1] [--reps 3]``

A chain A - B - C (B dials A, C dials B: the test networks' way) of fresh brokers (SQLite,
`sync = full`, journal on). One subscriber at each broker, subscribed to `bench/lat` at the
QoS given; one publisher at A sends `--messages` PUBLISHes at `--rate` per second, each
carrying the publisher's CLOCK_MONOTONIC in nanoseconds (one clock for every process of the
machine). Each subscriber records arrival minus sending time, so the three give the
end-to-end latency at 0, 1 and 2 hops, and their differences the latency a hop adds. The
rate is modest on purpose: this measures the path, not a queue. Output: a Markdown table
of the median, p90 and p99 per broker over all repetitions, and ``KEY network latency:
...``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from bench_network import HOST, start_chain

from telemq.protocol import Decoder, Publish
from telemq.protocol.codec import encode
from telemq.protocol.packets import Connect, PubAck, Subscribe

TOPIC = "bench/lat"
STAMP = struct.Struct(">Q")


async def subscriber(port: int, qos: int, name: str) -> asyncio.Task[list[float]]:
    """Connect and subscribe; the task collects latencies (ms) until the connection ends."""
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(encode(Connect(name, keepalive=600)))
    writer.write(encode(Subscribe(1, [(TOPIC, qos)])))
    decoder = Decoder()
    seen = 0
    while seen < 2:  # CONNACK, SUBACK
        seen += len(decoder.feed(await reader.read(1 << 16)))

    async def collect() -> list[float]:
        latencies: list[float] = []
        while data := await reader.read(1 << 16):
            now = time.monotonic_ns()
            for packet in decoder.feed(data):
                if isinstance(packet, Publish) and packet.topic == TOPIC:
                    (sent,) = STAMP.unpack_from(packet.payload)
                    latencies.append((now - sent) / 1e6)
                    if packet.qos == 1:
                        writer.write(encode(PubAck(packet.packet_id)))
        return latencies

    return asyncio.get_running_loop().create_task(collect())


async def publish(port: int, qos: int, messages: int, rate: float) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(encode(Connect("bench-latency-publisher", keepalive=600)))
    await reader.read(4)
    began = time.monotonic()
    for n in range(messages):
        delay = began + n / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        payload = STAMP.pack(time.monotonic_ns()) + b"x" * 24
        packet_id = n % 65535 + 1 if qos else 0
        writer.write(encode(Publish(TOPIC, payload, qos, False, False, packet_id)))
        await writer.drain()
    await asyncio.sleep(1.0)  # the last ones cross
    writer.close()


def run(messages: int, rate: float, qos: int, base: Path) -> dict[str, list[float]]:
    ports, processes = start_chain(base, "ABC")

    async def main() -> dict[str, list[float]]:
        tasks = {}
        for name in "ABC":
            tasks[name] = await subscriber(ports[name], qos, f"lat-{name}")
        await asyncio.sleep(2.0)  # the proxy subscriptions cross
        await publish(ports["A"], qos, messages, rate)
        for process in processes:
            process.terminate()
        return {name: await task for name, task in tasks.items()}

    try:
        return asyncio.run(main())
    finally:
        for process in processes:
            process.terminate()
            process.wait(20)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--qos", type=int, choices=(0, 1), default=1)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    gathered: dict[str, list[float]] = {name: [] for name in "ABC"}
    with tempfile.TemporaryDirectory(prefix="telemq-bench-latency-") as tmp:
        for rep in range(args.reps):
            result = run(args.messages, args.rate, args.qos, Path(tmp) / f"r{rep}")
            for name, values in result.items():
                if len(values) < args.messages * 0.99:
                    raise RuntimeError(f"broker {name}: {len(values)} of {args.messages} arrived")
                gathered[name] += values
            medians = ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in result.items())
            print(f"rep {rep}: median ms {medians}", flush=True)
    print(f"\nQoS {args.qos}, {args.messages} messages at {args.rate:.0f}/s, {args.reps} reps\n")
    print("| subscriber at | hops | median ms | p90 ms | p99 ms |")
    print("| --- | --- | --- | --- | --- |")
    for hops, name in enumerate("ABC"):
        values = gathered[name]
        print(
            f"| {name} | {hops} | {statistics.median(values):.2f} "
            f"| {percentile(values, 0.9):.2f} | {percentile(values, 0.99):.2f} |"
        )
    medians = [statistics.median(gathered[name]) for name in "ABC"]
    print(
        f"\nKEY network latency: qos{args.qos} hop1=+{medians[1] - medians[0]:.2f}ms "
        f"hop2=+{medians[2] - medians[1]:.2f}ms (median, over 0 hops {medians[0]:.2f}ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
