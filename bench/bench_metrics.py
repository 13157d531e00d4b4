"""What scraping `/metrics` every second costs an idle broker (not a test).

``python bench/bench_metrics.py [--clients 200] [--seconds 30] [--reps 3]``

One telemq broker (SQLite, journal on, its defaults) with an HTTP listener, `--clients` idle
MQTT clients connected (keep-alive off), each with a subscription of its own, and as many
offline persistent sessions with a queued message each: enough for the scrape's walks over
sessions and links to have something to walk. Periods of `--seconds` without scraping and
with one scrape a second (as Prometheus would, over one kept-alive connection) alternate;
the broker's CPU time over each is read from /proc. The cost is the difference, as a share
of one core; the scrape's own time (request to last byte) is reported too.

Output: a Markdown table and ``KEY metrics: scrape_cpu_percent=<median>``.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_network import cpu_seconds
from bench_websockets import HOST, start_broker

from telemq.protocol.codec import encode, encode_publish
from telemq.protocol.packets import Connect, Disconnect, Subscribe


def connect_clients(port: int, count: int) -> list[socket.socket]:
    """`count` idle clients subscribed to a topic each, and `count` offline sessions that
    hold one queued QoS 1 message each."""
    idle: list[socket.socket] = []
    for index in range(count):
        sock = socket.create_connection((HOST, port))
        sock.sendall(encode(Connect(f"bench-idle-{index}", keepalive=0)))
        sock.recv(4)  # CONNACK
        sock.sendall(encode(Subscribe(1, [(f"bench/metrics/idle/{index}", 0)])))
        sock.recv(5)  # SUBACK
        idle.append(sock)
    for index in range(count):
        with socket.create_connection((HOST, port)) as sock:
            connect = Connect(f"bench-away-{index}", clean_session=False, keepalive=0)
            sock.sendall(encode(connect))
            sock.recv(4)
            sock.sendall(encode(Subscribe(1, [(f"bench/metrics/away/{index}", 1)])))
            sock.recv(5)
            sock.sendall(encode(Disconnect()))
    with socket.create_connection((HOST, port)) as sock:
        sock.sendall(encode(Connect("bench-metrics-publisher")))
        sock.recv(4)
        for index in range(count):
            topic = f"bench/metrics/away/{index}".encode()
            sock.sendall(encode_publish(topic, b"queued", 1, False, False, index + 1))
        received = 0
        while received < 4 * count:  # the PUBACKs
            received += len(sock.recv(65536))
        sock.sendall(encode(Disconnect()))
    return idle


def period(pid: int, http_port: int, seconds: float, scrape: bool) -> tuple[float, list[float]]:
    """The broker's CPU seconds over `seconds`, and each scrape's duration."""
    opener = urllib.request.build_opener()
    took: list[float] = []
    before = cpu_seconds(pid)
    started = time.monotonic()
    tick = started
    while (now := time.monotonic()) < started + seconds:
        if scrape:
            with opener.open(f"http://{HOST}:{http_port}/metrics", timeout=10) as response:
                body = response.read()
            took.append(time.monotonic() - now)
            assert b"telemq_connections" in body
        tick += 1.0
        time.sleep(max(0.0, tick - time.monotonic()))
    return cpu_seconds(pid) - before, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="telemq-bench-metrics-") as workdir:
        broker, port, http_port = start_broker(Path(workdir))
        try:
            idle = connect_clients(port, args.clients)
            time.sleep(2.0)  # the start's own work done
            costs: list[float] = []
            scrapes: list[float] = []
            print("| rep | idle CPU % | scraped CPU % | scrape cost % of a core |")
            print("|---|---|---|---|")
            for rep in range(args.reps):
                order = (False, True) if rep % 2 == 0 else (True, False)
                cpu: dict[bool, float] = {}
                for scrape in order:
                    used, took = period(broker.pid, http_port, args.seconds, scrape)
                    cpu[scrape] = 100.0 * used / args.seconds
                    scrapes += took
                cost = cpu[True] - cpu[False]
                costs.append(cost)
                print(f"| {rep + 1} | {cpu[False]:.2f} | {cpu[True]:.2f} | {cost:.2f} |")
            for sock in idle:
                sock.close()
        finally:
            broker.terminate()
            broker.wait(30)
    median_ms = 1000 * statistics.median(scrapes)
    print(f"\none scrape: median {median_ms:.1f} ms, max {1000 * max(scrapes):.1f} ms")
    print(f"KEY metrics: scrape_cpu_percent={statistics.median(costs):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
