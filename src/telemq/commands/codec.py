"""The MQ command envelope on MQTT: `<mqmd>` and `<psc>` folders in, `<pscr>` out.

A command is the payload of an MQTT PUBLISH to a command topic (design §6):

* XML form: an optional `<mqmd>` folder (ReplyToQ, ReplyToQMgr, CorrelId in hex,
  MsgType request|datagram, Expiry in tenths of a second), the `<psc>` folder,
  optional `<mcd>`/`<usr>` folders (ignored), then, for Publish, the
  publication body: every byte after the last folder's closing tag.
* JSON form: `{"mqmd": {...}, "psc": {"Command": "RegSub", "Topic": ["a/#"], ...},
  "body": "text"}` (or `"bodyBase64"`); repeatable properties are lists.

Anything that does not parse is a `CommandSyntaxError` (answered with 3097
MQRCCF_PARM_SYNTAX_ERROR) whose message says where. Responses come back in the
form of the request.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

MAX_COMMAND_BYTES = 1024 * 1024
MQMD_SCAN_BYTES = 4096  # how far an over-long command is read for its <mqmd>

# Properties of <psc> that may repeat; all others occur at most once.
REPEATABLE = frozenset({"Topic", "RegOpt", "PubOpt", "DelOpt"})
KNOWN_PROPERTIES = frozenset(
    {
        "Command",
        "Topic",
        "SubPoint",
        "Filter",
        "RegOpt",
        "PubOpt",
        "DelOpt",
        "QMgrName",
        "QName",
        "SubName",
        "SubIdentity",
        "SubUserData",
        "PubTime",
        "SeqNum",
        "StreamName",
        "Kind",  # telemq's ListSubs: Subscriptions, Proxies or All
    }
)
MQMD_FIELDS = frozenset({"ReplyToQ", "ReplyToQMgr", "CorrelId", "MsgType", "Expiry"})
_FOLDER_START = re.compile(rb"\s*<([A-Za-z][A-Za-z0-9_]*)\s*>")


class CommandSyntaxError(ValueError):
    """The command message is malformed (reason 3097); the message says where.

    `mqmd` is the descriptor when it could still be read (an over-long XML command whose
    `<mqmd>` comes first), so that the reply goes where asked, with the CorrelId.
    """

    def __init__(self, message: str, mqmd: Mqmd | None = None) -> None:
        super().__init__(message)
        self.mqmd = mqmd


@dataclass(slots=True)
class Mqmd:
    """telemq's stand-in for the MQ message descriptor of a command."""

    reply_to_q: str = ""
    reply_to_qmgr: str = ""
    correl_id: str = ""  # hex digits, upper case; "" = none
    msg_type: str = "request"  # request | datagram
    expiry: int | None = None  # tenths of a second

    def correl_is_zero(self) -> bool:
        return not self.correl_id or set(self.correl_id) <= {"0"}


@dataclass(slots=True)
class Command:
    psc: dict[str, list[str]]
    mqmd: Mqmd = field(default_factory=Mqmd)
    body: bytes = b""
    form: str = "xml"  # xml | json: the form of the response

    @property
    def name(self) -> str:
        return self.first("Command")

    def first(self, name: str, default: str = "") -> str:
        values = self.psc.get(name)
        return values[0] if values else default

    def all(self, name: str) -> list[str]:
        return list(self.psc.get(name, ()))


@dataclass(slots=True)
class Reason:
    """One `<Response>` entry: a reason code and the property that caused it."""

    code: int
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Reply:
    """A `<pscr>` response."""

    completion: str  # ok | warning | error
    reasons: list[Reason] = field(default_factory=list)
    attributes: dict[str, list[str]] = field(default_factory=dict)  # FullResp
    message: str = ""  # human-readable detail (telemq extension: <Detail>)
    subscriptions: list[dict[str, list[str]]] = field(default_factory=list)  # ListSubs


def _normalize_hex(value: str, where: str) -> str:
    text = value.strip()
    if text[:2] in ("0x", "0X"):
        text = text[2:]
    try:
        binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        raise CommandSyntaxError(f"{where}: CorrelId {value!r} is not hexadecimal") from None
    return text.upper()


def _mqmd_from(values: dict[str, str], where: str) -> Mqmd:
    mqmd = Mqmd()
    for key, value in values.items():
        if key not in MQMD_FIELDS:
            raise CommandSyntaxError(
                f"{where}: unknown field <{key}> (known: {', '.join(sorted(MQMD_FIELDS))})"
            )
        if key == "ReplyToQ":
            mqmd.reply_to_q = value
        elif key == "ReplyToQMgr":
            mqmd.reply_to_qmgr = value
        elif key == "CorrelId":
            mqmd.correl_id = _normalize_hex(value, where)
        elif key == "MsgType":
            if value.lower() not in ("request", "datagram"):
                raise CommandSyntaxError(f"{where}: MsgType must be request or datagram")
            mqmd.msg_type = value.lower()
        elif key == "Expiry":
            try:
                expiry = int(value)
            except ValueError:
                expiry = 0
            if expiry == -1:  # MQEI_UNLIMITED
                mqmd.expiry = None
            elif 0 < expiry < 2**31:
                mqmd.expiry = expiry
            else:
                raise CommandSyntaxError(
                    f"{where}: Expiry must be a positive whole number of tenths of a second,"
                    f" or -1 for unlimited (got {value!r})"
                ) from None
    return mqmd


def _check_properties(psc: dict[str, list[str]], where: str) -> None:
    for name, values in psc.items():
        if name not in KNOWN_PROPERTIES:
            raise CommandSyntaxError(f"{where}: unknown property <{name}>")
        if len(values) > 1 and name not in REPEATABLE:
            raise CommandSyntaxError(f"{where}: property <{name}> may occur only once")
    if not psc.get("Command"):
        raise CommandSyntaxError(f"{where}: the <Command> property is missing")


def _parse_folder(text: str, name: str, offset: int) -> dict[str, list[str]]:
    if "<!" in text:
        raise CommandSyntaxError(
            f"<{name}> folder at byte {offset}: DOCTYPE, ENTITY and CDATA are not allowed"
        )
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise CommandSyntaxError(f"<{name}> folder at byte {offset}: {error}") from None
    values: dict[str, list[str]] = {}
    for child in root:
        if len(child):
            raise CommandSyntaxError(
                f"<{name}> folder at byte {offset}: property <{child.tag}> has nested elements"
            )
        values.setdefault(child.tag, []).append((child.text or "").strip())
    if (root.text or "").strip():
        raise CommandSyntaxError(f"<{name}> folder at byte {offset}: text outside a property")
    return values


def _parse_xml(payload: bytes) -> Command:
    position = 0
    folders: dict[str, dict[str, list[str]]] = {}
    while True:
        match = _FOLDER_START.match(payload, position)
        if match is None:
            break
        name = match.group(1).decode("ascii")
        if name not in ("mqmd", "psc", "mcd", "usr"):
            break  # the body begins (a body may itself start with '<')
        if name in folders:
            raise CommandSyntaxError(f"folder <{name}> appears twice (byte {match.start()})")
        close = payload.find(b"</" + name.encode("ascii") + b">", match.end())
        if close < 0:
            raise CommandSyntaxError(
                f"folder <{name}> opened at byte {match.start(1) - 1} is never closed"
            )
        end = close + len(name) + 3
        try:
            text = payload[match.start() : end].decode("utf-8").strip()
        except UnicodeDecodeError as error:
            raise CommandSyntaxError(
                f"folder <{name}> is not valid UTF-8 at byte {match.start() + error.start}"
            ) from None
        folders[name] = _parse_folder(text, name, match.start())
        position = end
        if name == "psc":
            # Only <mcd>/<usr> may follow <psc> before the body.
            following = _FOLDER_START.match(payload, position)
            if following is None or following.group(1) not in (b"mcd", b"usr"):
                break
    if "psc" not in folders:
        snippet = payload[:40].decode("utf-8", "replace")
        raise CommandSyntaxError(f"no <psc> folder at the start of the message (got {snippet!r})")
    psc = folders["psc"]
    _check_properties(psc, "<psc>")
    mqmd_values = {k: v[-1] for k, v in folders.get("mqmd", {}).items()}
    mqmd = _mqmd_from(mqmd_values, "<mqmd>")
    return Command(psc=psc, mqmd=mqmd, body=payload[position:], form="xml")


def _parse_json(payload: bytes) -> Command:
    try:
        document = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as error:
        raise CommandSyntaxError(f"JSON command: {error}") from None
    try:  # "\udcff" escapes decode to text that is not Unicode: no reply could carry it
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise CommandSyntaxError("JSON command: a string holds an unpaired surrogate") from None
    if not isinstance(document, dict):
        raise CommandSyntaxError("JSON command: the top level must be an object")
    unknown = set(document) - {"mqmd", "psc", "body", "bodyBase64"}
    if unknown:
        raise CommandSyntaxError(f"JSON command: unknown key(s) {sorted(unknown)}")
    raw_psc = document.get("psc")
    if not isinstance(raw_psc, dict):
        raise CommandSyntaxError('JSON command: "psc" must be an object')
    psc: dict[str, list[str]] = {}
    for key, value in raw_psc.items():
        items = value if isinstance(value, list) else [value]
        converted: list[str] = []
        for item in items:
            if isinstance(item, bool) or not isinstance(item, str | int):
                raise CommandSyntaxError(
                    f'JSON command: psc "{key}" must be a string or a list of strings'
                )
            converted.append(str(item))
        psc[key] = converted
    _check_properties(psc, '"psc"')
    raw_mqmd = document.get("mqmd", {})
    if not isinstance(raw_mqmd, dict):
        raise CommandSyntaxError('JSON command: "mqmd" must be an object')
    mqmd = _mqmd_from({k: str(v) for k, v in raw_mqmd.items()}, '"mqmd"')
    body = b""
    if "body" in document:
        if not isinstance(document["body"], str):
            raise CommandSyntaxError('JSON command: "body" must be a string')
        body = document["body"].encode("utf-8")
    if "bodyBase64" in document:
        try:
            body = base64.b64decode(str(document["bodyBase64"]), validate=True)
        except (binascii.Error, ValueError):
            raise CommandSyntaxError('JSON command: "bodyBase64" is not base64') from None
    return Command(psc=psc, mqmd=mqmd, body=body, form="json")


def _leading_mqmd(payload: bytes) -> Mqmd | None:
    """The `<mqmd>` folder at the start of an XML command, read from its first bytes only."""
    head = payload[:MQMD_SCAN_BYTES]
    match = _FOLDER_START.match(head)
    if match is None or match.group(1) != b"mqmd":
        return None
    close = head.find(b"</mqmd>", match.end())
    if close < 0:
        return None
    try:
        text = head[match.start() : close + len(b"</mqmd>")].decode("utf-8").strip()
        values = _parse_folder(text, "mqmd", match.start())
        return _mqmd_from({k: v[-1] for k, v in values.items()}, "<mqmd>")
    except (CommandSyntaxError, UnicodeDecodeError):
        return None


def parse_command(payload: bytes) -> Command:
    """Parse a command message; raises CommandSyntaxError naming the problem."""
    if len(payload) > MAX_COMMAND_BYTES:
        raise CommandSyntaxError(
            f"command of {len(payload)} bytes exceeds the limit of {MAX_COMMAND_BYTES}",
            _leading_mqmd(payload),
        )
    if payload.lstrip()[:1] == b"{":
        return _parse_json(payload)
    return _parse_xml(payload)


def _xml_folder(name: str, items: list[tuple[str, str]]) -> str:
    inner = "".join(f"<{key}>{escape(value)}</{key}>" for key, value in items)
    return f"<{name}>{inner}</{name}>"


def encode_reply(reply: Reply, command: Command | None, form: str = "xml") -> bytes:
    """Serialize a response; warnings and errors echo the command's <psc> (MQ rule)."""
    correl = command.mqmd.correl_id if command is not None else ""
    echo = command is not None and bool(command.psc) and reply.completion != "ok"
    if form == "json":
        pscr: dict[str, Any] = {"Completion": reply.completion}
        if reply.reasons:
            pscr["Response"] = [
                {"Reason": reason.code, **reason.properties} for reason in reply.reasons
            ]
        for key, values in reply.attributes.items():
            pscr[key] = values if key in REPEATABLE else values[0]
        if reply.message:
            pscr["Detail"] = reply.message
        if reply.subscriptions:
            pscr["Subscriptions"] = reply.subscriptions
        document: dict[str, Any] = {"mqmd": {"MsgType": "reply"}, "pscr": pscr}
        if correl:
            document["mqmd"]["CorrelId"] = correl
        if echo and command is not None:
            document["psc"] = {k: (v if k in REPEATABLE else v[0]) for k, v in command.psc.items()}
        return json.dumps(document, ensure_ascii=False).encode("utf-8")
    parts: list[str] = []
    mqmd_items = [("MsgType", "reply")]
    if correl:
        mqmd_items.append(("CorrelId", correl))
    parts.append(_xml_folder("mqmd", mqmd_items))
    inner = f"<Completion>{reply.completion}</Completion>"
    for reason in reply.reasons:
        fields = "".join(
            f"<{key}>{escape(value)}</{key}>" for key, value in reason.properties.items()
        )
        inner += f"<Response><Reason>{reason.code}</Reason>{fields}</Response>"
    for key, values in reply.attributes.items():
        inner += "".join(f"<{key}>{escape(value)}</{key}>" for value in values)
    if reply.message:
        inner += f"<Detail>{escape(reply.message)}</Detail>"
    for attributes in reply.subscriptions:
        listed = "".join(
            f"<{key}>{escape(value)}</{key}>"
            for key, values in attributes.items()
            for value in values
        )
        inner += f"<Subscription>{listed}</Subscription>"
    parts.append(f"<pscr>{inner}</pscr>")
    if echo and command is not None:
        parts.append(
            _xml_folder("psc", [(k, v) for k, values in command.psc.items() for v in values])
        )
    return "".join(parts).encode("utf-8")


def encode_command(
    psc: dict[str, list[str]], mqmd: dict[str, str] | None = None, body: bytes = b""
) -> bytes:
    """Client side: a command in the XML form (`<mqmd>`, `<psc>`, then the body verbatim).

    The XML form carries any body as it is (JSON needs base64 for bytes); a body that
    itself begins with an `<mcd>` or `<usr>` folder would be read as one, so that one
    goes in the JSON form with `bodyBase64`.
    """
    folder = _FOLDER_START.match(body)
    if folder is not None and folder.group(1) in (b"mcd", b"usr"):
        document: dict[str, Any] = {
            "psc": {k: (v if k in REPEATABLE else v[0]) for k, v in psc.items()},
            "bodyBase64": base64.b64encode(body).decode("ascii"),
        }
        if mqmd:
            document["mqmd"] = dict(mqmd)
        return json.dumps(document).encode("utf-8")
    head = _xml_folder("mqmd", list(mqmd.items())) if mqmd else ""
    items = [(key, value) for key, values in psc.items() for value in values]
    return (head + _xml_folder("psc", items)).encode("utf-8") + body


def reply_correl_id(payload: bytes) -> str:
    """Client side: the CorrelId a response carries (upper-case hex; "" for none)."""
    if payload.lstrip()[:1] == b"{":
        document = json.loads(payload)
        mqmd = document.get("mqmd") if isinstance(document, dict) else None
        return str(mqmd.get("CorrelId", "")).upper() if isinstance(mqmd, dict) else ""
    start = payload.find(b"<mqmd>")
    end = payload.find(b"</mqmd>")
    if start < 0 or end < start:
        return ""
    folder = ElementTree.fromstring(payload[start : end + len(b"</mqmd>")])
    return (folder.findtext("CorrelId") or "").strip().upper()


def parse_reply(payload: bytes) -> tuple[str, list[Reason], dict[str, list[str]]]:
    """Client side: (completion, reasons, other pscr properties) of a response.

    Lenient as the MQ documentation advises (it spells `</Reponse>` once).
    """
    if payload.lstrip()[:1] == b"{":
        document = json.loads(payload)
        pscr = document["pscr"]
        json_reasons = [
            Reason(int(r["Reason"]), {k: str(v) for k, v in r.items() if k != "Reason"})
            for r in pscr.get("Response", [])
        ]
        json_extra = {
            k: (v if isinstance(v, list) else [str(v)])
            for k, v in pscr.items()
            if k not in ("Completion", "Response")
        }
        return str(pscr["Completion"]), json_reasons, json_extra
    text = payload.decode("utf-8").replace("</Reponse>", "</Response>")
    start = text.index("<pscr>")
    end = text.index("</pscr>") + len("</pscr>")
    root = ElementTree.fromstring(text[start:end])
    completion = ""
    reasons: list[Reason] = []
    extra: dict[str, list[str]] = {}
    for child in root:
        if child.tag == "Completion":
            completion = (child.text or "").strip()
        elif child.tag == "Response":
            code = 0
            properties: dict[str, str] = {}
            for item in child:
                if item.tag == "Reason":
                    code = int((item.text or "0").strip())
                else:
                    properties[item.tag] = (item.text or "").strip()
            reasons.append(Reason(code, properties))
        else:
            extra.setdefault(child.tag, []).append((child.text or "").strip())
    return completion, reasons, extra
