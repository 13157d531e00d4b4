"""`PahoClient`: paho-mqtt (v2 callback API) run by its network thread, with blocking helpers.

Every callback records what happened under one condition variable; the blocking methods
wait on it with a deadline and raise `TimeoutError` naming what did not happen.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.subscribeoptions import SubscribeOptions

from .process import HOST, unique, wait_until

MQTT31 = 3
MQTT311 = 4
MQTT5 = 5
PAHO_PROTOCOLS = {MQTT31: paho.MQTTv31, MQTT311: paho.MQTTv311, MQTT5: paho.MQTTv5}
WAIT = 10.0  # default deadline for anything the broker should do "at once"


@dataclass(frozen=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False


@dataclass(frozen=True)
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool = False
    # MQTT 5.0: paho's `Properties` of the PUBLISH (None at 3.1/3.1.1); not compared.
    properties: Any = field(default=None, compare=False)


class PahoClient:
    """A paho-mqtt client with blocking helpers (see module docstring)."""

    def __init__(
        self,
        port: int,
        client_id: str | None = None,
        *,
        version: int = MQTT311,
        clean: bool = True,
        will: Will | None = None,
        keepalive: int = 60,
        reconnect: bool = False,
        username: str | None = None,
        password: str | None = None,
        properties: Any = None,
        websocket_path: str | None = None,
        tls_ca: str | None = None,
    ) -> None:
        """`properties`: MQTT 5.0 CONNECT properties (paho's `Properties`); at 5.0 `clean`
        is Clean Start. `websocket_path`: MQTT over WebSockets on that path (the port is
        then an HTTP listener's); `tls_ca`: TLS, trusting that CA file."""
        self.port = port
        self.client_id = unique("paho") if client_id is None else client_id
        self.clean = clean
        self.version = version
        self.connect_properties = properties
        self.client = paho.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=PAHO_PROTOCOLS[version],
            clean_session=None if version == MQTT5 else clean,
            reconnect_on_failure=reconnect,
            transport="websockets" if websocket_path is not None else "tcp",
        )
        if websocket_path is not None:
            self.client.ws_set_options(path=websocket_path)
        if tls_ca is not None:
            self.client.tls_set(ca_certs=tls_ca)
        self.keepalive = keepalive
        if will is not None:
            self.client.will_set(will.topic, will.payload, will.qos, will.retain)
        if username is not None:
            self.client.username_pw_set(username, password)
        self._cond = threading.Condition()
        self.messages: list[Received] = []
        self.connacks: list[tuple[bool, int]] = []
        self.connack_properties: Any = None  # MQTT 5.0: of the last CONNACK
        self.disconnect_reasons: list[int] = []  # MQTT 5.0: of DISCONNECTs the server sent
        self.disconnects = 0
        self._subacks: dict[int, list[int]] = {}
        self._published: set[int] = set()
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.on_publish = self._on_publish

    # -- callbacks (network thread) -------------------------------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        with self._cond:
            self.connacks.append((bool(flags.session_present), int(rc.value)))
            self.connack_properties = props
            self._cond.notify_all()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        with self._cond:
            self.disconnects += 1
            self.disconnect_reasons.append(int(rc.value))
            self._cond.notify_all()

    def _on_message(self, client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        props = getattr(msg, "properties", None) if self.version == MQTT5 else None
        with self._cond:
            self.messages.append(
                Received(
                    msg.topic,
                    bytes(msg.payload),
                    msg.qos,
                    bool(msg.retain),
                    bool(msg.dup),
                    props,
                )
            )
            self._cond.notify_all()

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        with self._cond:
            self._subacks[mid] = [int(c.value) for c in codes]
            self._cond.notify_all()

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        with self._cond:
            self._published.add(mid)
            self._cond.notify_all()

    # -- blocking API -------------------------------------------------------------------------

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise TimeoutError(f"{self.client_id}: {what} did not happen within {timeout} s")

    def connect(self, timeout: float = WAIT) -> bool:
        """Connect and wait for the CONNACK (return code 0 expected); returns the
        session-present flag."""
        seen = len(self.connacks)
        if self.version == MQTT5:
            self.client.connect(
                HOST,
                self.port,
                keepalive=self.keepalive,
                clean_start=self.clean,
                properties=self.connect_properties,
            )
        else:
            self.client.connect(HOST, self.port, keepalive=self.keepalive)
        self.client.loop_start()
        self._wait(lambda: len(self.connacks) > seen, timeout, "CONNACK")
        session_present, rc = self.connacks[-1]
        assert rc == 0, f"{self.client_id}: CONNECT refused with return code {rc}"
        return session_present

    def subscribe(
        self,
        topic: str | list[tuple[str, int]],
        qos: int = 0,
        options: Any = None,
        properties: Any = None,
    ) -> list[int]:
        """Subscribe and wait for the SUBACK; returns the granted QoS / failure codes.
        MQTT 5.0: `options` (paho's `SubscribeOptions`, instead of `qos`) and `properties`
        (a Subscription Identifier)."""
        if options is not None or properties is not None:
            assert isinstance(topic, str)
            if options is None:
                options = SubscribeOptions(qos=qos)
            rc, mid = self.client.subscribe(topic, options=options, properties=properties)
        elif isinstance(topic, list):
            rc, mid = self.client.subscribe(topic)
        else:
            rc, mid = self.client.subscribe(topic, qos)
        assert rc == paho.MQTT_ERR_SUCCESS and mid is not None, f"subscribe failed: {rc}"
        self._wait(lambda: mid in self._subacks, WAIT, f"SUBACK {mid}")
        return self._subacks[mid]

    def unsubscribe(self, topic: str) -> None:
        info = self.client.unsubscribe(topic)
        assert info[0] == paho.MQTT_ERR_SUCCESS

    def publish(
        self,
        topic: str,
        payload: bytes | str,
        qos: int = 0,
        retain: bool = False,
        properties: Any = None,
    ) -> None:
        """Publish and, for QoS 1/2, wait for PUBACK / PUBCOMP (`properties`: MQTT 5.0)."""
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        assert info.rc == paho.MQTT_ERR_SUCCESS, f"publish failed locally: {info.rc}"
        if qos > 0:
            self._wait(lambda: info.mid in self._published, WAIT, f"ack of message {info.mid}")

    def wait_messages(
        self, n: int, timeout: float = WAIT, topic: str | None = None
    ) -> list[Received]:
        """Wait until at least ``n`` messages (on ``topic`` if given) have arrived."""

        def matching() -> list[Received]:
            return [m for m in self.messages if topic is None or m.topic == topic]

        self._wait(lambda: len(matching()) >= n, timeout, f"{n} message(s) on {topic!r}")
        with self._cond:
            return matching()

    def received(self, topic: str | None = None) -> list[Received]:
        with self._cond:
            return [m for m in self.messages if topic is None or m.topic == topic]

    def wait_disconnected(self, timeout: float = WAIT) -> None:
        self._wait(lambda: self.disconnects > 0, timeout, "disconnect")

    def disconnect(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def close(self) -> None:
        try:
            self.client.disconnect()
        finally:
            self.client.loop_stop()

    def kill_socket(self) -> None:
        """End the TCP connection without DISCONNECT (an abnormal end for the broker)."""
        sock = self.client.socket()
        self.client.loop_stop()
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def sys_value(
    port: int,
    topic: str,
    timeout: float = 5.0,
    *,
    until: Callable[[str], bool] | None = None,
) -> str | None:
    """A `$SYS` value of the broker on `port`, read by a fresh subscriber to `topic`.

    Without `until`: the value as soon as one has come (the retained one), within
    `timeout` s. With `until`: the first value for which it holds, waiting up to `timeout`
    s while the broker publishes `$SYS` again every interval; past that, the last value
    seen. None when no value came at all.
    """
    client = PahoClient(port)
    client.connect()
    try:
        client.subscribe(topic, qos=0)

        def values() -> list[str]:
            return [m.payload.decode("utf-8") for m in client.received(topic)]

        def done() -> bool:
            seen = values()
            return any(until(v) for v in seen) if until is not None else bool(seen)

        wait_until(done, timeout)
        seen = values()
        if until is not None:
            for value in seen:
                if until(value):
                    return value
        return seen[-1] if seen else None
    finally:
        client.close()
