"""Idle connections (not a test): what N open, silent MQTT connections cost a broker,
telemq against Mosquitto side by side.

``python bench/bench_idle_connections.py [--connections 100000] [--protocol 4,5]
[--brokers telemq,mosquitto] [--idle-seconds 10] [--workers 4]``

For each broker in turn (telemq as a ``python3 -m telemq serve`` subprocess, the compiled
build when that is what is installed; Debian's ``/usr/sbin/mosquitto`` with a generated
configuration: anonymous, no persistence, no logging), on a free loopback port:

1. the broker's RSS once it is up and has answered one probe connection;
2. N connections opened by `--workers` client processes (raw sockets, a CONNECT encoded
   once per connection, `selectors`; at most `--concurrency` handshakes in flight per
   process), each from its own source address 127.0.0.(2+k) so that ephemeral ports do not
   run out. Every CONNACK must accept; the connect rate is N over the time until the last
   one arrived;
3. the broker's RSS again after a settling second (`--settle`): (after - before) / N is its
   memory per idle connection (the sockets' kernel buffers are not in RSS);
4. the broker's CPU over `--idle-seconds` with every connection silent (the keep-alive is
   60 s, so no client has to ping yet): the share of one core its timers and bookkeeping
   take;
5. a PINGREQ on every connection at once, and the time until every PINGRESP is back.

Each connection needs a file descriptor in the broker: N is capped at the hard
RLIMIT_NOFILE (less a margin), which this script raises its soft limit to and which the
brokers inherit; the output says when that cap applied. Output: a Markdown table and one
``KEY idle_connections: <broker> mqtt<level> kib_per_conn=...`` line per broker and
protocol; exit 1 when a connection was refused or a PINGREQ went unanswered.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

HOST = "127.0.0.1"
PINGREQ = b"\xc0\x00"
PINGRESP = b"\xd0\x00"
FD_MARGIN = 200  # descriptors a broker or a client process needs besides its connections
# Linux: bind() picks no port, connect() does, per (source, destination): 28k per address.
IP_BIND_ADDRESS_NO_PORT = 24


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard one (inherited by the brokers); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def connect_packet(client_id: str, protocol: int, keepalive: int) -> bytes:
    """A clean-session CONNECT at level 4 (3.1.1) or 5 (5.0, no properties)."""
    ident = client_id.encode()
    variable = b"\x00\x04MQTT" + bytes((protocol, 0x02)) + keepalive.to_bytes(2, "big")
    if protocol == 5:
        variable += b"\x00"
    body = variable + len(ident).to_bytes(2, "big") + ident
    length = len(body)
    assert length < 128
    return bytes((0x10, length)) + body


def accepted(data: bytes) -> bool:
    """A CONNACK with return (or reason) code 0, at either level."""
    return len(data) >= 4 and data[0] == 0x20 and data[3] == 0


# -- a client process --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConnectionPlan:
    """What one client process opens: `count` connections to `port` from `source`, client
    ids `<prefix>-<n>`, `concurrency` handshakes at a time."""

    port: int
    count: int
    source: str
    prefix: str
    protocol: int
    keepalive: int
    concurrency: int


def client_process(control: Connection, plan: ConnectionPlan) -> None:
    """Holds `plan.count` connections; answers the commands "connect", "ping", "close"."""
    raise_fd_limit()
    sockets: list[socket.socket] = []
    while True:
        command = control.recv()
        if command == "connect":
            started = time.perf_counter()
            failed = open_connections(sockets, plan)
            control.send((len(sockets), failed, time.perf_counter() - started))
        elif command == "ping":
            started = time.perf_counter()
            answered = ping_all(sockets)
            control.send((answered, time.perf_counter() - started))
        else:
            for sock in sockets:
                sock.close()
            sockets.clear()
            control.send("closed")
            return


def open_connections(done: list[socket.socket], plan: ConnectionPlan) -> int:
    """Opens the plan's connections, `concurrency` handshakes at a time; returns the failures."""
    port, count, concurrency = plan.port, plan.count, plan.concurrency
    selector = selectors.DefaultSelector()
    started = failed = in_flight = 0
    deadline = time.monotonic() + 120
    while len(done) + failed < count:
        while started < count and in_flight < concurrency:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((plan.source, 0))
            sock.setblocking(False)
            sock.connect_ex((HOST, port))
            packet = connect_packet(f"{plan.prefix}-{started}", plan.protocol, plan.keepalive)
            selector.register(sock, selectors.EVENT_WRITE, packet)
            started += 1
            in_flight += 1
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count - len(done)} connections still not accepted")
        for key, mask in selector.select(1.0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if mask & selectors.EVENT_WRITE:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    selector.unregister(sock)
                    sock.close()
                    failed += 1
                    in_flight -= 1
                    continue
                sock.send(key.data)
                selector.modify(sock, selectors.EVENT_READ)
                continue
            selector.unregister(sock)
            in_flight -= 1
            try:
                data = sock.recv(64)
            except OSError:
                data = b""
            if accepted(data):
                done.append(sock)
            else:
                sock.close()
                failed += 1
    selector.close()
    return failed


def ping_all(sockets: list[socket.socket]) -> int:
    """PINGREQ on every connection, then every PINGRESP; returns how many came back."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.send(PINGREQ)
        selector.register(sock, selectors.EVENT_READ)
    answered = 0
    deadline = time.monotonic() + 120
    while answered < len(sockets) and time.monotonic() < deadline:
        for key, _ in selector.select(1.0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            selector.unregister(sock)
            if sock.recv(16) == PINGRESP:
                answered += 1
    selector.close()
    return answered


# -- brokers -----------------------------------------------------------------------------


def start_telemq(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "telemq", "serve", "--host", HOST, "--port", str(port)]
    command += ["--data-dir", str(workdir / "data"), "--log-level", "warning"]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL)


def start_mosquitto(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    executable = shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin:/usr/bin")
    if executable is None:
        raise RuntimeError("mosquitto not found (apt-get install mosquitto)")
    config = workdir / "mosquitto.conf"
    config.write_text(
        f"listener {port} {HOST}\nallow_anonymous true\npersistence false\nlog_dest none\n"
        "max_connections -1\n"
    )
    return subprocess.Popen([executable, "-c", str(config)], stdin=subprocess.DEVNULL)


STARTERS = {"telemq": start_telemq, "mosquitto": start_mosquitto}


def wait_listening(process: subprocess.Popen[bytes], port: int, name: str) -> None:
    """Until one probe connection is accepted (the broker is up and has served one)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}")
        try:
            with socket.create_connection((HOST, port), timeout=2) as probe:
                probe.sendall(connect_packet("probe", 4, 60))
                if accepted(probe.recv(64)):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not start")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def measure(name: str, protocol: int, args: argparse.Namespace, count: int) -> dict[str, float]:
    """One broker, one protocol level: the figures of the module docstring."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="idle-") as workdir:
        broker = STARTERS[name](Path(workdir), port)
        workers: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
        try:
            wait_listening(broker, port, name)
            time.sleep(args.settle)
            rss_before = rss_kib(broker.pid)
            context = multiprocessing.get_context("fork")
            share, extra = divmod(count, args.workers)
            for index in range(args.workers):
                ours, theirs = context.Pipe()
                share_here = share + (1 if index < extra else 0)
                process = context.Process(
                    target=client_process,
                    args=(
                        theirs,
                        ConnectionPlan(
                            port,
                            share_here,
                            f"127.0.0.{2 + index}",
                            f"idle{protocol}-{index}",
                            protocol,
                            args.keepalive,
                            args.concurrency,
                        ),
                    ),
                    daemon=True,
                )
                process.start()
                workers.append((process, ours))
            cpu_start = cpu_seconds(broker.pid)
            for _, control in workers:
                control.send("connect")
            results = [control.recv() for _, control in workers]
            connected = sum(result[0] for result in results)
            failed = sum(result[1] for result in results)
            connect_time = max(result[2] for result in results)
            cpu_connect = cpu_seconds(broker.pid) - cpu_start
            time.sleep(args.settle)
            rss_after = rss_kib(broker.pid)
            cpu_idle_start = cpu_seconds(broker.pid)
            time.sleep(args.idle_seconds)
            cpu_idle = cpu_seconds(broker.pid) - cpu_idle_start
            for _, control in workers:
                control.send("ping")
            pings = [control.recv() for _, control in workers]
            answered = sum(ping[0] for ping in pings)
            ping_time = max(ping[1] for ping in pings)
            for _, control in workers:
                control.send("close")
                control.recv()
        finally:
            for process, _ in workers:
                process.join(10)
                if process.is_alive():
                    process.kill()
            stop(broker)
    if failed or answered != connected:
        raise SystemExit(
            f"{name}: {failed} connections refused, {connected - answered} pings unanswered"
        )
    return {
        "connected": connected,
        "kib_per_conn": (rss_after - rss_before) / max(connected, 1),
        "rss_before_mib": rss_before / 1024,
        "rss_after_mib": rss_after / 1024,
        "connect_rate": connected / connect_time,
        "cpu_us_per_connect": cpu_connect / max(connected, 1) * 1e6,
        "idle_cpu_share": cpu_idle / args.idle_seconds,
        "ping_all_s": ping_time,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=100_000)
    parser.add_argument("--brokers", default="telemq,mosquitto")
    parser.add_argument("--protocol", default="4", help="4 (3.1.1), 5 (5.0), or 4,5")
    parser.add_argument("--keepalive", type=int, default=60)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--settle", type=float, default=1.0, help="seconds before each RSS")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=50, help="handshakes per worker")
    args = parser.parse_args()
    hard = raise_fd_limit()
    count = args.connections
    if count > hard - FD_MARGIN:
        count = hard - FD_MARGIN
        print(
            f"RLIMIT_NOFILE's hard limit is {hard}: {count:,} connections instead of "
            f"{args.connections:,} (every connection is a descriptor in the broker)"
        )
    args.workers = max(args.workers, -(-count // (hard - FD_MARGIN)))
    rows = []
    for protocol in (int(level) for level in args.protocol.split(",")):
        for name in args.brokers.split(","):
            figures = measure(name, protocol, args, count)
            rows.append((name, protocol, figures))
            print(
                f"KEY idle_connections: {name} mqtt{protocol} "
                + " ".join(f"{key}={value:.4g}" for key, value in figures.items())
            )
    print(
        "\n| broker | MQTT | connections | KiB per connection | RSS before -> after (MiB) "
        "| connections/s | broker CPU us per connect | idle CPU (share of a core) "
        "| PINGREQ on all (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, protocol, f in rows:
        level = "5.0" if protocol == 5 else "3.1.1"
        print(
            f"| {name} | {level} | {f['connected']:,.0f} | {f['kib_per_conn']:.2f} "
            f"| {f['rss_before_mib']:.1f} -> {f['rss_after_mib']:.1f} "
            f"| {f['connect_rate']:,.0f} | {f['cpu_us_per_connect']:.0f} "
            f"| {f['idle_cpu_share']:.4f} | {f['ping_all_s']:.3f} |"
        )


if __name__ == "__main__":
    main()
