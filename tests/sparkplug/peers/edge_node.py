"""A Sparkplug B edge node with devices: pysparkplug's `EdgeNode` and `Device`, run by the
tests of tests/sparkplug with the interpreter of `.venv-sparkplug` (pysparkplug needs
paho-mqtt < 2; the test suite runs paho-mqtt 2).

    edge_node.py --port P --group G --node E [--device D ...]

It connects (MQTT 3.1.1, its NDEATH as will), publishes NBIRTH and a DBIRTH per device,
then reads commands, one a line, from stdin:

    ndata <int>            NDATA: the metric `counter` set to <int>
    ddata <device> <int>   DDATA: the device's metric `reading` set to <int>
    exit                   NDEATH, then DISCONNECT (no will), and the process ends

An NCMD `Node Control/Rebirth` = true publishes NBIRTH and the DBIRTHs again (pysparkplug
0.6.1 has no rebirth of its own: `rebirth` does what its connect callback does). What it
does is printed as JSON lines on stdout: {"event": "ready"} once births are sent,
{"event": "rebirth"}, {"event": "ack", "command": ...} after each command. A test that
wants the connection dropped kills the process: the broker then publishes the will.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from typing import Any

import pysparkplug as sp

REBIRTH = "Node Control/Rebirth"


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


class RebirthingEdgeNode(sp.EdgeNode):
    """`EdgeNode`, and a rebirth: NBIRTH (with the session's bdSeq) and every DBIRTH again."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.birth_bd_seq: sp.Metric | None = None
        self.born = threading.Event()  # set once the births of the connection are sent
        super().__init__(*args, **kwargs)

    def _setup_will(self) -> None:
        # EdgeNode calls this before connecting (the will of the session) and after the
        # births (the next session's): the metric it replaces is the births' bdSeq.
        self.birth_bd_seq = getattr(self, "_bd_seq_metric", None)
        super()._setup_will()
        if self._connected:
            self.born.set()

    def rebirth(self) -> None:
        client = self._client
        assert self.birth_bd_seq is not None
        # An NBIRTH's seq is 0 (as EdgeNode's connect callback resets it).
        self._EdgeNode__seq_cycler = itertools.cycle(range(256))
        metrics = (*self.metrics.values(), self.birth_bd_seq)
        nbirth = sp.NBirth(timestamp=sp.get_current_timestamp(), seq=self._seq, metrics=metrics)
        topic = sp.Topic(
            message_type=sp.MessageType.NBIRTH,
            group_id=self.group_id,
            edge_node_id=self.edge_node_id,
        )
        client.publish(sp.Message(topic, nbirth, sp.QoS.AT_MOST_ONCE, False), include_dtypes=True)
        for device in self.devices.values():
            dbirth = sp.DBirth(
                timestamp=sp.get_current_timestamp(),
                seq=self._seq,
                metrics=tuple(device.metrics.values()),
            )
            topic = sp.Topic(
                message_type=sp.MessageType.DBIRTH,
                group_id=self.group_id,
                edge_node_id=self.edge_node_id,
                device_id=device.device_id,
            )
            client.publish(
                sp.Message(topic, dbirth, sp.QoS.AT_MOST_ONCE, False), include_dtypes=True
            )


def on_ncmd(node: sp.EdgeNode, message: sp.Message) -> None:
    payload = message.payload
    metrics = getattr(payload, "metrics", ())
    if any(metric.name == REBIRTH and metric.value for metric in metrics):
        assert isinstance(node, RebirthingEdgeNode)
        node.rebirth()
        say(event="rebirth")


def metric(name: str, value: int) -> sp.Metric:
    return sp.Metric(
        timestamp=sp.get_current_timestamp(), name=name, datatype=sp.DataType.INT64, value=value
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--device", action="append", default=[])
    args = parser.parse_args()
    client = sp.Client(client_id=f"edge-{args.group}-{args.node}")
    node = RebirthingEdgeNode(
        args.group, args.node, [metric("counter", 0)], client=client, cmd_callback=on_ncmd
    )
    for device_id in args.device:
        node.register(sp.Device(device_id, [metric("reading", 0)]))
    node.connect("127.0.0.1", port=args.port, blocking=False)
    if not node.born.wait(10):
        say(event="error", problem="no CONNACK within 10 s")
        sys.exit(1)
    say(event="ready")
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "ndata":
            node.update([metric("counter", int(words[1]))])
        elif words[0] == "ddata":
            node.update_device(words[1], [metric("reading", int(words[2]))])
        elif words[0] == "exit":
            node.disconnect()
            say(event="ack", command="exit")
            return
        say(event="ack", command=words[0])


if __name__ == "__main__":
    main()
