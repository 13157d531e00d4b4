"""End-to-end broker benchmark (not a test): a telemq broker as a subprocess, driven over
loopback by telemq's own MQTT codec, every message checked.

``python bench/bench_broker.py [--seconds 3] [--qos 0,1,2] [--journal on,off] [--persistent]
[--protocol 4,5]``

For each (QoS, journal, protocol) a fresh broker is started with the default store (SQLite,
``sync = "full"``) in a temporary directory. P publishers send 32-byte sequenced messages to
``bench/<run>/p<i>`` (clean sessions, or persistent ones with ``--persistent``: then a QoS 2
release also keeps its packet id, docs/reliability.md); one subscriber on ``bench/<run>/+``
at the same QoS receives them. A
publisher may have at most `--window` messages that are not yet both acknowledged to it and
received by the subscriber, so the broker's queues stay bounded and the rate is sustainable.
At the end the subscriber's sequence numbers are checked: QoS 1/2 must lose nothing and
QoS 2 must not duplicate; the run fails (exit 1) otherwise.

``--protocol`` picks the clients' MQTT version: 4 (3.1.1, the default) and/or 5 (5.0: level-5
CONNECT, PUBLISHes with an empty property block, a persistent session with a Session Expiry
Interval of 0xFFFFFFFF). The checks are the same; when both are run, a ratio line per
(QoS, journal) gives the 5.0 rate over the 3.1.1 rate.

The client is Python too, so on a small machine it shares the CPU with the broker; the
yardstick for comparisons with other brokers is the C load generator described in
docs/performance.md. This script is the quick, dependency-free check that a change did not
make the broker slower or lossy: compare runs made on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from telemq.protocol.codec import Decoder, encode, encode_publish
from telemq.protocol.codec5 import encode_publish5
from telemq.protocol.packets import (
    ConnAck,
    Connect,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
)
from telemq.protocol.property_table import Properties

HOST = "127.0.0.1"
NO_PROPERTIES = b"\x00"  # an empty 5.0 property block
PROTOCOL_NAMES = {4: "3.1.1", 5: "5.0"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@dataclass
class Tally:
    """What the subscriber saw, per publisher."""

    seen: list[set[int]]
    received: int = 0
    duplicates: int = 0
    waiters: list[asyncio.Event] = field(default_factory=list)


class MqttPeer(asyncio.Protocol):
    """A minimal MQTT 3.1.1 or 5.0 client over telemq's codec: just what the benchmark
    needs. Acknowledgements with reason 0 are the same bytes at both levels."""

    def __init__(self, protocol: int = 4) -> None:
        self.decoder = Decoder(protocol_level=protocol, mqtt5=protocol == 5)
        self.transport: asyncio.Transport | None = None
        self.packets: asyncio.Queue[object] = asyncio.Queue()
        self.on_packet = self.packets.put_nowait

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for packet in self.decoder.feed(data):
            self.on_packet(packet)

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


async def connect(port: int, client_id: str, clean: bool = True, protocol: int = 4) -> MqttPeer:
    loop = asyncio.get_running_loop()
    _, peer = await loop.create_connection(lambda: MqttPeer(protocol), HOST, port)
    # 5.0: a session outlives its connection only with a Session Expiry Interval.
    expiry = Properties(session_expiry_interval=0xFFFFFFFF) if protocol == 5 and not clean else None
    peer.send(
        encode(
            Connect(
                client_id,
                protocol_level=protocol,
                clean_session=clean,
                keepalive=60,
                properties=expiry,
            )
        )
    )
    answer = await asyncio.wait_for(peer.packets.get(), 10)
    assert isinstance(answer, ConnAck) and answer.return_code == 0, answer
    return peer


async def run_load(
    port: int,
    qos: int,
    publishers: int,
    window: int,
    seconds: float,
    persistent: bool = False,
    protocol: int = 4,
) -> tuple[int, float, Tally]:
    run = uuid.uuid4().hex[:8]
    v5 = protocol == 5
    tally = Tally([set() for _ in range(publishers)])
    subscriber = await connect(port, f"sub-{run}", protocol=protocol)
    subscriber.send(encode(Subscribe(1, [(f"bench/{run}/+", qos)]), protocol))
    suback = await asyncio.wait_for(subscriber.packets.get(), 10)
    assert isinstance(suback, SubAck) and suback.return_codes == [qos], suback
    in_flight = [0] * publishers  # sent, not yet (acknowledged and received)
    acked_unseen = [set[int]() for _ in range(publishers)]  # acknowledged, not yet received
    wakeups = [asyncio.Event() for _ in range(publishers)]

    def settle(publisher: int) -> None:
        in_flight[publisher] -= 1
        if in_flight[publisher] < window:
            wakeups[publisher].set()

    def on_delivery(packet: object) -> None:
        if isinstance(packet, Publish):
            publisher, seq = struct.unpack_from(">II", packet.payload)
            seen = tally.seen[publisher]
            if seq in seen:
                tally.duplicates += 1
            else:
                seen.add(seq)
                tally.received += 1
                if qos == 0:
                    settle(publisher)
                elif seq in acked_unseen[publisher]:
                    acked_unseen[publisher].discard(seq)
                    settle(publisher)  # else its acknowledgement settles it
            if packet.qos == 1:
                subscriber.send(encode(PubAck(packet.packet_id)))
            elif packet.qos == 2:
                subscriber.send(encode(PubRec(packet.packet_id)))
        elif isinstance(packet, PubRel):
            subscriber.send(encode(PubComp(packet.packet_id)))

    subscriber.on_packet = on_delivery
    stop_at = time.monotonic() + seconds
    sent = [0] * publishers

    async def publish(index: int) -> None:
        peer = await connect(port, f"pub-{run}-{index}", clean=not persistent, protocol=protocol)
        topic = f"bench/{run}/p{index}".encode()
        seq_of: dict[int, int] = {}

        def on_ack(packet: object) -> None:
            if isinstance(packet, PubRec):
                peer.send(encode(PubRel(packet.packet_id)))
                return
            if isinstance(packet, PubAck | PubComp):
                seq = seq_of.pop(packet.packet_id)
                if seq in tally.seen[index]:
                    settle(index)
                else:
                    acked_unseen[index].add(seq)  # settled when it is received

        peer.on_packet = on_ack
        padding = b"\0" * 24
        seq = 0
        while time.monotonic() < stop_at:
            while in_flight[index] < window:
                packet_id = seq % 65535 + 1 if qos else 0
                if qos:
                    seq_of[packet_id] = seq
                payload = struct.pack(">II", index, seq) + padding
                peer.send(
                    encode_publish5(topic, payload, qos, False, False, packet_id, NO_PROPERTIES)
                    if v5
                    else encode_publish(topic, payload, qos, False, False, packet_id)
                )
                in_flight[index] += 1
                seq += 1
            wakeups[index].clear()
            await wakeups[index].wait()
        sent[index] = seq
        deadline = time.monotonic() + 15
        while in_flight[index] and time.monotonic() < deadline:
            wakeups[index].clear()
            try:
                await asyncio.wait_for(wakeups[index].wait(), 1)
            except TimeoutError:
                if qos == 0:
                    break  # QoS 0 may lose; do not wait for what will not come
        assert peer.transport is not None
        peer.transport.close()

    start = time.monotonic()
    await asyncio.gather(*(publish(i) for i in range(publishers)))
    elapsed = time.monotonic() - start
    assert subscriber.transport is not None
    subscriber.transport.close()
    return sum(sent), elapsed, tally


def broker_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker(data_dir: Path, journal: bool) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = data_dir / "bench.toml"
    config.write_text(f"[journal]\nenabled = {'true' if journal else 'false'}\n")
    command = [
        sys.executable,
        "-m",
        "telemq",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir / "data"),
        "--config",
        str(config),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the broker did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--qos", default="0,1,2")
    parser.add_argument("--journal", default="on,off")
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument(
        "--persistent", action="store_true", help="publishers with persistent sessions"
    )
    parser.add_argument(
        "--protocol", default="4", help="MQTT levels of the clients: 4 (3.1.1) and/or 5 (5.0)"
    )
    args = parser.parse_args()
    protocols = [int(p) for p in args.protocol.split(",")]
    if any(p not in PROTOCOL_NAMES for p in protocols):
        parser.error("--protocol takes 4 and/or 5")
    failed = False
    print(
        f"{args.publishers} {'persistent ' if args.persistent else ''}publishers -> 1 subscriber,"
        f" window {args.window}, "
        f"{args.seconds:g} s per run, sync = full"
    )
    print(
        f"{'qos':>3} {'journal':>7} {'mqtt':>5} {'msgs/s':>10} {'broker cpu':>10}"
        f" {'msgs/cpu-s':>11} {'lost':>6} {'dup':>5}"
    )
    for journal in [j.strip() == "on" for j in args.journal.split(",")]:
        for qos in [int(q) for q in args.qos.split(",")]:
            rates: dict[int, float] = {}
            for protocol in protocols:
                with tempfile.TemporaryDirectory(prefix="telemq-bench-") as tmp:
                    process, port = start_broker(Path(tmp), journal)
                    try:
                        cpu_before = broker_cpu_seconds(process.pid)
                        sent, elapsed, tally = asyncio.run(
                            run_load(
                                port,
                                qos,
                                args.publishers,
                                args.window,
                                args.seconds,
                                args.persistent,
                                protocol,
                            )
                        )
                        cpu = broker_cpu_seconds(process.pid) - cpu_before
                    finally:
                        process.terminate()
                        process.wait(10)
                lost = sent - tally.received
                bad = (qos > 0 and lost > 0) or (qos == 2 and tally.duplicates > 0)
                failed |= bad
                rates[protocol] = tally.received / elapsed
                print(
                    f"{qos:>3} {'on' if journal else 'off':>7} {PROTOCOL_NAMES[protocol]:>5}"
                    f" {rates[protocol]:>10,.0f} {cpu / elapsed:>10.2f}"
                    f" {tally.received / max(cpu, 1e-9):>11,.0f}"
                    f" {lost:>6} {tally.duplicates:>5}{'  FAIL' if bad else ''}"
                )
            if 4 in rates and 5 in rates:
                print(
                    f"{qos:>3} {'on' if journal else 'off':>7} 5.0/3.1.1 rate"
                    f" {rates[5] / max(rates[4], 1e-9):.3f}"
                )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
