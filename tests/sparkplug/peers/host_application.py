"""A Sparkplug B host application: paho-mqtt 1.6 (the MQTT client pysparkplug runs on) with
pysparkplug's topics and payloads, run by the tests of tests/sparkplug with the interpreter
of `.venv-sparkplug`. pysparkplug 0.6.1's own `Client` speaks MQTT 3.1.1 only and cannot
subscribe outside `spBv1.0/`, so the session is paho's and everything Sparkplug is
pysparkplug's.

    host_application.py --port P --host-id H [--mqtt 3.1.1|5] [--certificates]

It connects as the specification asks (3.1.1: Clean Session; 5.0: Clean Start and Session
Expiry Interval 0), with its STATE death certificate as will (spBv1.0/STATE/H, QoS 1,
retained, {"online": false, "timestamp": <the CONNECT's time>}); subscribes to its own
STATE topic and `spBv1.0/#` (and `$sparkplug/certificates/#` with --certificates: a host
that joins late reads the births there); then publishes its STATE birth (QoS 1, retained,
online, the will's timestamp). Every message it gets is printed as a JSON line:

    {"event": "message", "topic": ..., "retain": ..., "qos": ..., "type": "NBIRTH",
     "timestamp": ..., "seq": ..., "metrics": {name: value}}   (Sparkplug B payloads)
    {"event": "message", "topic": ..., "type": "STATE", "online": ..., "timestamp": ...}
    {"event": "message", "topic": ..., "type": ..., "error": ...}  (what does not decode)

and {"event": "online", "timestamp": ...} once its STATE birth is acknowledged. Commands,
one a line, on stdin:

    rebirth <group> <edge node>   NCMD `Node Control/Rebirth` = true
    exit                          STATE death (online false), then DISCONNECT

A test that wants the connection dropped kills the process: the broker publishes the will.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

import paho.mqtt.client as mqtt
import pysparkplug as sp
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

CERTIFICATES = "$sparkplug/certificates/"
lock = threading.Lock()


def say(**fields: Any) -> None:
    with lock:
        print(json.dumps(fields), flush=True)


def plain(value: Any) -> Any:
    """A metric value as JSON can carry it."""
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return repr(value)


def describe(topic_name: str, raw: bytes) -> dict[str, Any]:
    """The message's Sparkplug content, decoded by pysparkplug; a certificate's topic is
    read without its `$sparkplug/certificates/` prefix."""
    sparkplug_topic = topic_name.removeprefix(CERTIFICATES)
    try:
        topic = sp.Topic.from_str(sparkplug_topic)
        kind = topic.message_type
        payload = kind.payload.decode(raw)  # type: ignore[union-attr]
    except Exception as error:  # what pysparkplug cannot read: reported, not fatal
        levels = sparkplug_topic.split("/")
        kind_name = levels[2] if len(levels) > 2 else ""
        return {"type": kind_name, "error": f"{type(error).__name__}: {error}"}
    if isinstance(payload, sp.State):
        return {"type": "STATE", "online": payload.online, "timestamp": payload.timestamp}
    found: dict[str, Any] = {"type": str(kind.value), "timestamp": payload.timestamp}
    found["seq"] = getattr(payload, "seq", None)
    metrics = getattr(payload, "metrics", None)
    if metrics is None:  # NDEATH: its bdSeq
        metrics = (payload.bd_seq_metric,)
    found["metrics"] = {metric.name: plain(metric.value) for metric in metrics}
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host-id", required=True)
    parser.add_argument("--mqtt", choices=("3.1.1", "5"), default="3.1.1")
    parser.add_argument("--certificates", action="store_true")
    args = parser.parse_args()
    v5 = args.mqtt == "5"
    state_topic = str(sp.Topic(message_type=sp.MessageType.STATE, sparkplug_host_id=args.host_id))
    if v5:
        client = mqtt.Client(client_id=f"host-{args.host_id}", protocol=mqtt.MQTTv5)
    else:
        client = mqtt.Client(
            client_id=f"host-{args.host_id}", clean_session=True, protocol=mqtt.MQTTv311
        )
    connect_time = sp.get_current_timestamp()
    death = sp.State(timestamp=connect_time, online=False).encode()
    client.will_set(state_topic, death, qos=1, retain=True)
    subscribed = threading.Event()

    def on_message(_client: mqtt.Client, _userdata: Any, message: mqtt.MQTTMessage) -> None:
        say(
            event="message",
            topic=message.topic,
            retain=bool(message.retain),
            qos=message.qos,
            **describe(message.topic, message.payload),
        )

    def on_subscribe(*_: Any) -> None:
        subscribed.set()

    client.on_message = on_message
    client.on_subscribe = on_subscribe
    topics = [(state_topic, 1), ("spBv1.0/#", 1)]
    if args.certificates:
        topics.append((CERTIFICATES + "#", 1))
    if v5:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 0
        client.connect("127.0.0.1", args.port, clean_start=True, properties=properties)
    else:
        client.connect("127.0.0.1", args.port)
    client.loop_start()
    client.subscribe(topics)
    if not subscribed.wait(10):
        say(event="error", problem="no SUBACK within 10 s")
        sys.exit(1)
    birth = sp.State(timestamp=connect_time, online=True).encode()
    client.publish(state_topic, birth, qos=1, retain=True).wait_for_publish(10)
    say(event="online", timestamp=connect_time)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "rebirth":
            topic = sp.Topic(
                message_type=sp.MessageType.NCMD, group_id=words[1], edge_node_id=words[2]
            )
            rebirth = sp.Metric(
                timestamp=sp.get_current_timestamp(),
                name="Node Control/Rebirth",
                datatype=sp.DataType.BOOLEAN,
                value=True,
            )
            payload = sp.NCmd(timestamp=sp.get_current_timestamp(), metrics=(rebirth,))
            encoded = payload.encode(include_dtypes=True)
            client.publish(str(topic), encoded, qos=0).wait_for_publish()
        elif words[0] == "exit":
            offline = sp.State(timestamp=sp.get_current_timestamp(), online=False).encode()
            client.publish(state_topic, offline, qos=1, retain=True).wait_for_publish()
            client.disconnect()
            client.loop_stop()
            say(event="ack", command="exit")
            return
        say(event="ack", command=words[0])


if __name__ == "__main__":
    main()
