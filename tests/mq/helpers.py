"""Black-box helpers for the MQ command-model tests.

Everything here talks to a broker only through a subprocess and MQTT over TCP on 127.0.0.1:

* ``BrokerProcess`` (from ``testsupport``, shared with the broker tests) runs ``python -m
  telemq serve`` with a TOML file written by the test (``config_text``) and stops it;
* ``xml_command`` / ``json_command`` build command messages (``<mqmd>``, ``<psc>``, body; or
  the JSON form) and ``parse_reply`` reads ``<pscr>`` responses. Both are written from the
  contract, independently of telemq's own codec;
* ``MQClient`` extends ``testsupport``'s paho wrapper: it sends commands and waits for their
  replies, and collects publications delivered to its session (its queue).
"""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from testsupport.paho import WAIT, PahoClient
from testsupport.paho import Received as Received
from testsupport.process import LIVE_BROKERS as LIVE_BROKERS
from testsupport.process import BrokerProcess as BrokerProcess
from testsupport.process import BrokerStartError as BrokerStartError
from testsupport.process import free_port as free_port
from testsupport.process import unique
from testsupport.process import users_and_acl as users_and_acl
from testsupport.process import wait_until as wait_until

HOST = "127.0.0.1"
CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
DEFAULT_STREAM = "SYSTEM.BROKER.DEFAULT.STREAM"
RESPONSE_PREFIX = "SYSTEM.BROKER.RESPONSE/"


FORMS = ("xml", "json")

PscValue = str | Sequence[str]


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
# paho-mqtt
# ---------------------------------------------------------------------------------------------


class MQClient(PahoClient):
    """A paho-mqtt client (MQTT 3.1.1) with blocking helpers for MQ commands.

    On ``connect`` it subscribes to its default reply topic
    (``SYSTEM.BROKER.RESPONSE/<client id>``) and to a private sentinel topic; every command
    gets an automatic ``CorrelId`` (unless the test gives its own mqmd) so that its reply can
    be told apart. Subscriptions and publications default to QoS 1.
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
        super().__init__(
            port,
            unique("c") if client_id is None else client_id,
            clean=clean,
            username=username,
            password=password,
        )
        self.reply_topic = RESPONSE_PREFIX + self.client_id
        self.sentinel_topic = f"sentinel/{self.client_id}"

    # -- plain MQTT ------------------------------------------------------------------------------

    def connect(self, *, replies: bool = True, timeout: float = WAIT) -> bool:
        """Connect (CONNACK 0 expected); returns session present. With ``replies``, subscribe
        to the reply topic and the sentinel topic."""
        present = super().connect(timeout)
        if replies:
            codes = self.subscribe([(self.reply_topic, 2), (self.sentinel_topic, 1)])
            assert codes == [2, 1], f"reply/sentinel SUBACK {codes}"
        return present

    def subscribe(self, topic: str | list[tuple[str, int]], qos: int = 1) -> list[int]:
        return super().subscribe(topic, qos)

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False) -> None:
        super().publish(topic, payload, qos, retain)

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
