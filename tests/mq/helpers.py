"""Black-box helpers for the MQ command-model tests.

Everything here talks to a broker only through a subprocess and MQTT over TCP on 127.0.0.1:

* ``BrokerProcess`` runs ``python -m telemq serve`` with a TOML file written by the test and
  stops it (SIGTERM, then SIGKILL);
* ``xml_command`` / ``json_command`` build command messages (``<mqmd>``, ``<psc>``, body; or
  the JSON form) and ``parse_reply`` reads ``<pscr>`` responses. Both are written from the
  contract, independently of telemq's own codec;
* ``MQClient`` is a blocking wrapper around paho-mqtt that sends commands and waits for their
  replies, and collects publications delivered to its session (its queue).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from telemq.broker.auth import hash_password

HOST = "127.0.0.1"
CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
DEFAULT_STREAM = "SYSTEM.BROKER.DEFAULT.STREAM"
RESPONSE_PREFIX = "SYSTEM.BROKER.RESPONSE/"

START_DEADLINE = 15.0
STOP_DEADLINE = 10.0
WAIT = 10.0  # default deadline for anything the broker should do "at once"

FORMS = ("xml", "json")

PscValue = str | Sequence[str]


def unique(prefix: str = "t") -> str:
    """A short unique name (also usable as an MQTT 3.1.1 client id)."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# Command messages
# ---------------------------------------------------------------------------------------------


def _values(value: PscValue) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def xml_command(
    psc: Mapping[str, PscValue],
    mqmd: Mapping[str, str] | None = None,
    body: bytes = b"",
) -> bytes:
    """``<mqmd>`` (when given), ``<psc>`` (list values repeat the property, in order), body."""
    out = ""
    if mqmd:
        out += "<mqmd>" + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in mqmd.items()) + "</mqmd>"
    inner = "".join(
        f"<{key}>{escape(item)}</{key}>" for key, value in psc.items() for item in _values(value)
    )
    return (out + f"<psc>{inner}</psc>").encode("utf-8") + body


def json_command(
    psc: Mapping[str, PscValue],
    mqmd: Mapping[str, str] | None = None,
    body: bytes = b"",
) -> bytes:
    """The JSON form; repeatable properties (Topic, RegOpt, PubOpt, DelOpt) are lists."""
    document: dict[str, Any] = {}
    if mqmd:
        document["mqmd"] = dict(mqmd)
    document["psc"] = {
        key: (_values(value) if key in ("Topic", "RegOpt", "PubOpt", "DelOpt") else value)
        for key, value in psc.items()
    }
    if body:
        document["body"] = body.decode("utf-8")
    return json.dumps(document).encode("utf-8")


def build_command(
    form: str,
    psc: Mapping[str, PscValue],
    mqmd: Mapping[str, str] | None = None,
    body: bytes = b"",
) -> bytes:
    if form == "xml":
        return xml_command(psc, mqmd, body)
    if form == "json":
        return json_command(psc, mqmd, body)
    raise ValueError(form)


@dataclass
class Reply:
    """A parsed response: completion, one dict per ``Response`` (``Reason`` as int) and the
    other ``pscr`` properties; ``echo`` is the echoed ``psc`` (warnings and errors)."""

    completion: str
    responses: list[dict[str, Any]]
    fields: dict[str, list[str]]
    correl_id: str
    form: str
    echo: dict[str, list[str]] | None
    topic: str
    qos: int
    raw: bytes
    subscriptions: list[dict[str, list[str]]] = field(default_factory=list)

    @property
    def reasons(self) -> list[int]:
        return [int(r["Reason"]) for r in self.responses]

    def prop(self, name: str) -> list[str]:
        """The values of a `pscr` property other than Completion and Response."""
        return self.fields.get(name, [])

    def __str__(self) -> str:
        return f"reply on {self.topic!r}: {self.raw.decode('utf-8', 'replace')}"


def _json_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _parse_json_reply(payload: bytes, topic: str, qos: int) -> Reply:
    document = json.loads(payload)
    pscr = document["pscr"]
    responses = [dict(r) for r in pscr.get("Response", [])]
    for r in responses:
        r["Reason"] = int(r["Reason"])
    fields = {
        k: _json_list(v)
        for k, v in pscr.items()
        if k not in ("Completion", "Response", "Subscriptions")
    }
    subscriptions = [
        {k: _json_list(v) for k, v in s.items()} for s in pscr.get("Subscriptions", [])
    ]
    echo = None
    if "psc" in document:
        echo = {k: _json_list(v) for k, v in document["psc"].items()}
    correl = str(document.get("mqmd", {}).get("CorrelId", ""))
    return Reply(
        str(pscr["Completion"]),
        responses,
        fields,
        correl,
        "json",
        echo,
        topic,
        qos,
        payload,
        subscriptions,
    )


def parse_reply(payload: bytes, topic: str = "", qos: int = 0) -> Reply:
    """Read a ``<pscr>`` reply (XML, lenient about ``</Reponse>``) or its JSON form."""
    text = payload.decode("utf-8")
    if text.lstrip().startswith("{"):
        return _parse_json_reply(payload, topic, qos)
    text = text.replace("</Reponse>", "</Response>")
    correl = ""
    if "<mqmd>" in text:
        mqmd = ElementTree.fromstring(text[text.index("<mqmd>") : text.index("</mqmd>") + 7])
        correl = (mqmd.findtext("CorrelId") or "").strip()
    start = text.index("<pscr>")
    end = text.index("</pscr>") + len("</pscr>")
    root = ElementTree.fromstring(text[start:end])
    completion = ""
    responses: list[dict[str, Any]] = []
    fields: dict[str, list[str]] = {}
    subscriptions: list[dict[str, list[str]]] = []
    for child in root:
        if child.tag == "Completion":
            completion = (child.text or "").strip()
        elif child.tag == "Response":
            entry: dict[str, Any] = {}
            for item in child:
                value = (item.text or "").strip()
                entry[item.tag] = int(value) if item.tag == "Reason" else value
            responses.append(entry)
        elif child.tag == "Subscription":
            listed: dict[str, list[str]] = {}
            for item in child:
                listed.setdefault(item.tag, []).append((item.text or "").strip())
            subscriptions.append(listed)
        else:
            fields.setdefault(child.tag, []).append((child.text or "").strip())
    echo: dict[str, list[str]] | None = None
    rest = text[end:]
    if "<psc>" in rest:
        folder = ElementTree.fromstring(rest[rest.index("<psc>") : rest.index("</psc>") + 6])
        echo = {}
        for item in folder:
            echo.setdefault(item.tag, []).append((item.text or "").strip())
    return Reply(
        completion, responses, fields, correl, "xml", echo, topic, qos, payload, subscriptions
    )


def assert_ok(reply: Reply) -> None:
    assert reply.completion == "ok", str(reply)
    assert reply.responses == [], str(reply)


def assert_error(reply: Reply, reason: int) -> dict[str, Any]:
    """An error reply with exactly one Response carrying ``reason``; returns that Response."""
    assert reply.completion == "error", str(reply)
    assert reply.reasons == [reason], str(reply)
    return reply.responses[0]


def assert_warning(reply: Reply, *reasons: int) -> list[dict[str, Any]]:
    assert reply.completion == "warning", str(reply)
    assert sorted(reply.reasons) == sorted(reasons), str(reply)
    return reply.responses


# ---------------------------------------------------------------------------------------------
# The broker subprocess
# ---------------------------------------------------------------------------------------------


LIVE_BROKERS: list[BrokerProcess] = []


class BrokerStartError(RuntimeError):
    pass


def _probe(port: int) -> bool:
    """True when a CONNECT on ``port`` is answered with a CONNACK (whatever its code)."""
    client_id = unique("ready").encode()
    body = (
        struct.pack(">H", 4)
        + b"MQTT"
        + bytes([4, 0x02])
        + struct.pack(">H", 0)
        + struct.pack(">H", len(client_id))
        + client_id
    )
    try:
        with socket.create_connection((HOST, port), timeout=2.0) as sock:
            sock.sendall(bytes([0x10, len(body)]) + body)
            data = b""
            while len(data) < 4:
                chunk = sock.recv(4 - len(data))
                if not chunk:
                    return False
                data += chunk
            with contextlib.suppress(OSError):
                sock.sendall(b"\xe0\x00")
            return data[0] == 0x20
    except OSError:
        return False


@dataclass
class BrokerProcess:
    """``python -m telemq serve --config F --data-dir D`` with listeners from the config.

    ``ports`` are the listener ports written into the config (``ports[0]`` is the default
    listener); the TOML text given by the test is appended after them.
    """

    workdir: Path
    config_text: str = ""
    sub_points_of_ports: Sequence[str] = ("",)
    ports: list[int] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.stderr_path = self.workdir / "broker.stderr.log"
        self.config_path = self.workdir / "telemq.toml"
        if not self.ports:
            self.ports = [free_port() for _ in self.sub_points_of_ports]
        listeners = "".join(
            f'\n[[listeners]]\nhost = "{HOST}"\nport = {port}\nsub_point = "{point}"\n'
            for port, point in zip(self.ports, self.sub_points_of_ports, strict=True)
        )
        # Top-level keys first (the test's text), then the listener tables.
        self.config_path.write_text(self.config_text + "\n" + listeners, encoding="utf-8")

    @property
    def port(self) -> int:
        return self.ports[0]

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "telemq",
            "serve",
            "--config",
            str(self.config_path),
            "--data-dir",
            str(self.data_dir),
        ]

    def start(self) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.starts += 1
        with self.stderr_path.open("ab") as err:
            err.write(f"--- start {self.starts}\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=self.workdir,
            )
        if self not in LIVE_BROKERS:
            LIVE_BROKERS.append(self)
        deadline = time.monotonic() + START_DEADLINE
        for port in self.ports:
            while not _probe(port):
                if self.proc.poll() is not None:
                    raise BrokerStartError(
                        f"broker exited with {self.proc.returncode}\n{self.log_tail()}"
                    )
                if time.monotonic() > deadline:
                    raise BrokerStartError(f"broker not ready on {port}\n{self.log_tail()}")
                time.sleep(0.05)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if the broker has not exited within the deadline."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_DEADLINE)
                raise AssertionError(f"broker ignored SIGTERM\n{self.log_tail()}") from None
        return int(proc.returncode)

    def restart(self) -> BrokerProcess:
        code = self.stop()
        assert code == 0, f"broker exited with {code}\n{self.log_tail()}"
        return self.start()

    def finalize(self) -> None:
        try:
            if self.running:
                self.stop()
        except AssertionError:
            pass
        finally:
            if self in LIVE_BROKERS:
                LIVE_BROKERS.remove(self)

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        tail = text.splitlines()[-lines:]
        return "--- broker stderr ---\n" + "\n".join(tail)


# ---------------------------------------------------------------------------------------------
# paho-mqtt
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool


class MQClient:
    """A paho-mqtt (v2 API, MQTT 3.1.1) client with blocking helpers for MQ commands.

    On ``connect`` it subscribes to its default reply topic
    (``SYSTEM.BROKER.RESPONSE/<client id>``) and to a private sentinel topic; every command
    gets an automatic ``CorrelId`` (unless the test gives its own mqmd) so that its reply can
    be told apart.
    """

    def __init__(
        self,
        port: int,
        client_id: str | None = None,
        *,
        clean: bool = True,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.port = port
        self.client_id = unique("c") if client_id is None else client_id
        self.clean = clean
        self.client = paho.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=paho.MQTTv311,
            clean_session=clean,
            reconnect_on_failure=False,
        )
        if username is not None:
            self.client.username_pw_set(username, password)
        self.reply_topic = RESPONSE_PREFIX + self.client_id
        self.sentinel_topic = f"sentinel/{self.client_id}"
        self._cond = threading.Condition()
        self.messages: list[Received] = []
        self.connacks: list[tuple[bool, int]] = []
        self.disconnects = 0
        self._subacks: dict[int, list[int]] = {}
        self._published: set[int] = set()
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.on_publish = self._on_publish

    # -- callbacks (network thread) ------------------------------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        with self._cond:
            self.connacks.append((bool(flags.session_present), int(rc.value)))
            self._cond.notify_all()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        with self._cond:
            self.disconnects += 1
            self._cond.notify_all()

    def _on_message(self, client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.messages.append(Received(msg.topic, bytes(msg.payload), msg.qos, bool(msg.retain)))
            self._cond.notify_all()

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        with self._cond:
            self._subacks[mid] = [int(c.value) for c in codes]
            self._cond.notify_all()

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        with self._cond:
            self._published.add(mid)
            self._cond.notify_all()

    # -- plain MQTT ------------------------------------------------------------------------------

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise TimeoutError(f"{self.client_id}: {what} did not happen within {timeout} s")

    def connect(self, *, replies: bool = True, timeout: float = WAIT) -> bool:
        """Connect (CONNACK 0 expected); returns session present. With ``replies``, subscribe
        to the reply topic and the sentinel topic."""
        seen = len(self.connacks)
        self.client.connect(HOST, self.port, keepalive=60)
        self.client.loop_start()
        self._wait(lambda: len(self.connacks) > seen, timeout, "CONNACK")
        present, rc = self.connacks[-1]
        assert rc == 0, f"{self.client_id}: CONNECT refused with return code {rc}"
        if replies:
            codes = self.subscribe([(self.reply_topic, 2), (self.sentinel_topic, 1)])
            assert codes == [2, 1], f"reply/sentinel SUBACK {codes}"
        return present

    def subscribe(self, topic: str | list[tuple[str, int]], qos: int = 1) -> list[int]:
        """SUBSCRIBE and wait for the SUBACK; returns its return codes."""
        rc, mid = (
            self.client.subscribe(topic)
            if isinstance(topic, list)
            else self.client.subscribe(topic, qos)
        )
        assert rc == paho.MQTT_ERR_SUCCESS and mid is not None, f"subscribe failed: {rc}"
        self._wait(lambda: mid in self._subacks, WAIT, f"SUBACK {mid}")
        return self._subacks[mid]

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False) -> None:
        """PUBLISH and, for QoS 1/2, wait for the acknowledgement."""
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        assert info.rc == paho.MQTT_ERR_SUCCESS, f"publish failed locally: {info.rc}"
        if qos > 0:
            self._wait(lambda: info.mid in self._published, WAIT, f"ack of message {info.mid}")

    def disconnect(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def close(self) -> None:
        try:
            self.client.disconnect()
        finally:
            self.client.loop_stop()

    # -- deliveries ----------------------------------------------------------------------------

    def deliveries(self, topic_prefix: str = "") -> list[Received]:
        """Messages received other than replies and sentinels (optionally under a prefix)."""
        with self._cond:
            return [
                m
                for m in self.messages
                if not m.topic.startswith((RESPONSE_PREFIX, "sentinel/"))
                and m.topic != self.reply_topic
                and m.topic.startswith(topic_prefix)
            ]

    def wait_deliveries(self, n: int, topic_prefix: str, timeout: float = WAIT) -> list[Received]:
        self._wait(
            lambda: len(self.deliveries(topic_prefix)) >= n,
            timeout,
            f"{n} deliveries under {topic_prefix!r} (got {self.deliveries(topic_prefix)})",
        )
        return self.deliveries(topic_prefix)

    def sync(self, publisher: MQClient | None = None, qos: int = 1) -> None:
        """Wait until a sentinel published now (by ``publisher``, default this client) has
        arrived here: whatever was routed to this session before it has arrived too."""
        marker = uuid.uuid4().hex.encode()
        (publisher or self).publish(self.sentinel_topic, marker, qos=qos)
        self._wait(
            lambda: any(m.payload == marker for m in self.messages),
            WAIT,
            "sentinel",
        )

    # -- MQ commands ---------------------------------------------------------------------------

    def replies(self, topic: str | None = None) -> list[Reply]:
        topic = topic or self.reply_topic
        with self._cond:
            raw = [m for m in self.messages if m.topic == topic]
        return [parse_reply(m.payload, m.topic, m.qos) for m in raw]

    def send(self, payload: bytes, topic: str = CONTROL_QUEUE, qos: int = 1) -> None:
        self.publish(topic, payload, qos=qos)

    def send_raw(
        self,
        payload: bytes,
        topic: str = CONTROL_QUEUE,
        *,
        qos: int = 1,
        reply_topic: str | None = None,
        correl_id: str | None = None,
        timeout: float = WAIT,
    ) -> Reply:
        """Send a command message as is and wait for its reply (the first new message on the
        reply topic, or the first one carrying ``correl_id``)."""
        topic_of_reply = reply_topic or self.reply_topic
        with self._cond:
            before = sum(1 for m in self.messages if m.topic == topic_of_reply)
        self.publish(topic, payload, qos=qos)

        def found() -> Received | None:
            seen = [m for m in self.messages if m.topic == topic_of_reply][before:]
            for message in seen:
                if correl_id is None:
                    return message
                try:
                    parsed = parse_reply(message.payload)
                except Exception:
                    continue  # not a reply: something else published on that topic
                if parsed.correl_id.upper() == correl_id.upper():
                    return message
            return None

        self._wait(lambda: found() is not None, timeout, f"reply on {topic_of_reply!r}")
        with self._cond:
            message = found()
        assert message is not None
        return parse_reply(message.payload, message.topic, message.qos)

    def command(
        self,
        psc: Mapping[str, PscValue],
        *,
        form: str = "xml",
        mqmd: Mapping[str, str] | None = None,
        body: bytes = b"",
        topic: str | None = None,
        qos: int = 1,
        correl: bool = True,
        timeout: float = WAIT,
    ) -> Reply:
        """Send one command and return its reply.

        ``topic`` defaults to the right queue for the command. Without an mqmd CorrelId a
        fresh one is added (``correl=False``: none) to pair the reply with the request.
        """
        fields = dict(mqmd or {})
        if correl and "CorrelId" not in fields:
            fields["CorrelId"] = uuid.uuid4().hex[:16].upper()
        name = _values(psc["Command"])[0] if "Command" in psc else ""
        if topic is None:
            topic = DEFAULT_STREAM if name in ("Publish", "DeletePub") else CONTROL_QUEUE
        payload = build_command(form, psc, fields, body)
        return self.send_raw(
            payload,
            topic,
            qos=qos,
            reply_topic=fields.get("ReplyToQ"),
            correl_id=fields.get("CorrelId"),
            timeout=timeout,
        )

    def list_subs(self, **psc: str) -> list[dict[str, list[str]]]:
        """telemq's ListSubs (docs/mq.md): every subscription, narrowed by the properties."""
        reply = self.command({"Command": "ListSubs", **psc}, form="json")
        assert_ok(reply)
        return reply.subscriptions


def connected(port: int, client_id: str | None = None, **kwargs: Any) -> MQClient:
    client = MQClient(port, client_id, **kwargs)
    client.connect()
    return client


def users_and_acl(passwords: Mapping[str, str], acl: Sequence[tuple[str, str, str, bool]]) -> str:
    """`[[users]]` (cheaply hashed passwords) and `[[acl]]` tables for a test configuration;
    `acl` holds (user, action, topic, allow) rules."""
    lines: list[str] = []
    for user, password in passwords.items():
        digest = hash_password(password, iterations=1000)
        lines += ["[[users]]", f'name = "{user}"', f'password_hash = "{digest}"', ""]
    for user, action, topic, allow in acl:
        lines += [
            "[[acl]]",
            f'user = "{user}"',
            f'action = "{action}"',
            f'topic = "{topic}"',
            f"allow = {'true' if allow else 'false'}",
            "",
        ]
    return "\n".join(lines)
