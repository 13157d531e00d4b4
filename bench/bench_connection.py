"""The protocol core's work per message, without sockets: `Connection` alone.

Theory of operation
-------------------
The broker's per-message cost has a part that is all protocol: decoding a PUBLISH,
tracking an outbound QoS 1 message until its PUBACK, queueing a shared QoS 0 frame and
draining the output. This drives `telemq.protocol.Connection` objects directly (bytes in,
bytes out, no event loop), so a change inside the state machine shows up here apart from
the broker's routing and the kernel's sockets.

Each scenario prints operations per second. Under ``valgrind --tool=callgrind`` the
instruction counts are repeatable whatever else the machine does, which makes this the
way to compare two builds of the compiled core on a busy machine::

    python3 bench/bench_connection.py                      # rates
    PYTHONPATH=<build> valgrind --tool=callgrind --callgrind-out-file=cg.out \\
        python3 bench/bench_connection.py --messages 20000  # instructions
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from telemq.protocol.codec import encode_ack, encode_publish
from telemq.protocol.connection import Connection
from telemq.protocol.events import MessageReceived
from telemq.protocol.flows import Flows
from telemq.protocol.packets import PacketType
from telemq.protocol.peer5 import ServerLimits5


def _connect_bytes(level: int, client_id: bytes) -> bytes:
    body = b"\x00\x04MQTT" + bytes([level, 0x02, 0x00, 0x3C])
    if level == 5:
        body += b"\x00"  # no properties
    body += len(client_id).to_bytes(2, "big") + client_id
    return bytes([0x10, len(body)]) + body


def connected(level: int, name: bytes) -> Connection:
    """A connection past CONNACK, its output drained."""
    conn = Connection(now=0.0, mqtt5=ServerLimits5() if level == 5 else None)
    conn.receive_data(_connect_bytes(level, name), 0.0)
    conn.accept(False, Flows(), 0.0)
    conn.data_to_send()
    return conn


def fan_out_qos0(messages: int, level: int) -> None:
    """One shared 3.1.1 frame (or a 5.0 PUBLISH each) to 100 subscribers."""
    subscribers = [connected(level, b"s%d" % i) for i in range(100)]
    frame = encode_publish(b"bench/fanout", b"x" * 64, 0, False, False, 0)
    for _ in range(messages // 100):
        for conn in subscribers:
            if level == 5:
                conn.send_publish(b"bench/fanout", b"x" * 64, False, b"")
            else:
                conn.send_frame_qos0(frame)
            conn.data_to_send()


def publish_in_qos1(messages: int, level: int) -> None:
    """PUBLISH QoS 1 decoded, its event taken, PUBACK queued and drained."""
    conn = connected(level, b"pub")
    frames = []
    for packet_id in range(1, 101):
        frame = encode_publish(b"bench/in", b"x" * 64, 1, False, False, packet_id)
        if level == 5:  # an empty property block after the packet id
            head = 2 + 2 + len(b"bench/in") + 2
            frame = bytes([frame[0], frame[1] + 1]) + frame[2:head] + b"\x00" + frame[head:]
        frames.append(frame)
    batch = b"".join(frames)
    for _ in range(messages // 100):
        for event in conn.receive_data(batch, 1.0):
            assert isinstance(event, MessageReceived), event
            conn.acknowledge(PacketType.PUBACK, event.publish.packet_id)
        conn.data_to_send()


def deliver_qos1(messages: int, level: int) -> None:
    """A QoS 1 PUBLISH tracked and sent, then its PUBACK received."""
    conn = connected(level, b"sub")
    for _ in range(messages // 100):
        ids = [conn.deliver(b"bench/out", b"x" * 64, 1, False, None, 1.0) for _ in range(100)]
        conn.data_to_send()
        conn.receive_data(b"".join(encode_ack(PacketType.PUBACK, i) for i in ids), 1.0)


SCENARIOS: dict[str, Callable[[int, int], None]] = {
    "fanout_qos0": fan_out_qos0,
    "publish_in_qos1": publish_in_qos1,
    "deliver_qos1": deliver_qos1,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--levels", default="4,5", help="protocol levels, comma-separated")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    args = parser.parse_args()
    for level in (int(x) for x in args.levels.split(",")):
        for name in args.scenarios.split(","):
            scenario = SCENARIOS[name]
            started = time.perf_counter()
            scenario(args.messages, level)
            seconds = time.perf_counter() - started
            print(f"{name:16} level {level}: {args.messages / seconds:12,.0f} messages/s")


if __name__ == "__main__":
    main()
