"""`telemq subs register|deregister|request-update|list`: MQ commands to a running broker.

Each sub-command builds a JSON `<psc>` command, publishes it to the broker's
control queue over MQTT and prints the reply. The exit code is 0 for `ok`,
1 for `warning` and 2 for `error` or a broker that cannot be reached.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from typing import Any

from ..client import MqttClient, MqttError
from ..commands import CONTROL_QUEUE, RESPONSE_PREFIX, parse_reply
from ..protocol import SUBACK_FAILURE


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="broker address (default 127.0.0.1)")
    parser.add_argument("--port", "-p", type=int, default=1883, help="broker port (default 1883)")
    parser.add_argument("--username", "-u", help="user name for CONNECT")
    parser.add_argument("--password", "-P", help="password for CONNECT")
    parser.add_argument("--json", action="store_true", help="print the raw JSON reply")


def _selection(parser: argparse.ArgumentParser, topics_required: bool) -> None:
    parser.add_argument(
        "--topic",
        "-t",
        action="append",
        default=[],
        required=topics_required,
        help="topic filter (repeatable)",
    )
    parser.add_argument("--queue", "-q", help="subscriber queue (QName; default: this tool's id)")
    parser.add_argument("--qmgr", help="queue manager name (QMgrName)")
    parser.add_argument("--sub-point", help="subscription point (SubPoint)")
    parser.add_argument("--filter", "-f", help="SQL content filter (Filter)")
    parser.add_argument("--name", "-n", help="subscription name (SubName)")
    parser.add_argument("--identity", "-i", help="subscriber identity (SubIdentity)")
    parser.add_argument("--correl-id", help="CorrelId in hex (with --option CorrelAsId)")
    parser.add_argument(
        "--option", "-o", action="append", default=[], help="RegOpt value (repeatable)"
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subs = subparsers.add_parser(
        "subs",
        help="manage MQ subscriptions on a running broker",
        description="Send MQ publish/subscribe commands to a running broker.",
    )
    actions = subs.add_subparsers(dest="subs_command", metavar="ACTION", required=True)

    reg = actions.add_parser("register", help="RegSub: register a subscription")
    _common(reg)
    _selection(reg, topics_required=True)
    reg.add_argument("--user-data", help="SubUserData")
    reg.add_argument(
        "--expiry", type=_lifetime, help="subscription lifetime in seconds (more than 0)"
    )
    reg.set_defaults(handler=run, psc_command="RegSub")

    dereg = actions.add_parser("deregister", help="DeregSub: remove subscriptions")
    _common(dereg)
    _selection(dereg, topics_required=False)
    dereg.set_defaults(handler=run, psc_command="DeregSub")

    update = actions.add_parser(
        "request-update", help="ReqUpdate: have the retained publications sent again"
    )
    _common(update)
    _selection(update, topics_required=False)
    update.set_defaults(handler=run, psc_command="ReqUpdate")

    listing = actions.add_parser("list", help="list subscriptions with every attribute")
    _common(listing)
    listing.add_argument("--queue", "-q", help="only this queue")
    listing.add_argument("--sub-point", help="only this subscription point")
    listing.add_argument("--name", "-n", help="only this subscription name")
    listing.add_argument(
        "--no-proxies",
        action="store_true",
        help="leave out the proxy subscriptions of neighbour brokers (listed to admins)",
    )
    listing.set_defaults(handler=run, psc_command="ListSubs")


def _lifetime(text: str) -> float:
    """A subscription lifetime: a finite number of seconds above zero (MQMD Expiry is in
    tenths of a second, so at least 0.1)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds < 0.1 or seconds * 10 >= 2**31:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the lifetime must be between 0.1 and {(2**31 - 1) / 10:g} seconds"
        )
    return seconds


def build_command(args: argparse.Namespace) -> dict[str, Any]:
    psc: dict[str, Any] = {"Command": args.psc_command}
    mqmd: dict[str, Any] = {}

    def put(key: str, value: object) -> None:
        if value not in (None, "", []):
            psc[key] = value

    put("Topic", getattr(args, "topic", None))
    put("QName", getattr(args, "queue", None))
    put("QMgrName", getattr(args, "qmgr", None))
    put("SubPoint", getattr(args, "sub_point", None))
    put("Filter", getattr(args, "filter", None))
    put("SubName", getattr(args, "name", None))
    put("SubIdentity", getattr(args, "identity", None))
    put("SubUserData", getattr(args, "user_data", None))
    put("RegOpt", getattr(args, "option", None))
    if args.psc_command == "ListSubs":
        put("Kind", "Subscriptions" if getattr(args, "no_proxies", False) else "All")
    if getattr(args, "correl_id", None):
        mqmd["CorrelId"] = args.correl_id
    if getattr(args, "expiry", None) is not None:
        mqmd["Expiry"] = round(args.expiry * 10)
    document: dict[str, Any] = {"psc": psc}
    if mqmd:
        document["mqmd"] = mqmd
    return document


def run(args: argparse.Namespace) -> int:
    document = build_command(args)
    try:
        payload = json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        bad = error.object[error.start : error.end].encode("utf-8", "surrogateescape")
        print(f"telemq subs: an argument is not valid UTF-8 (bytes {bad!r})", file=sys.stderr)
        return 2
    try:
        with MqttClient(
            args.host, args.port, username=args.username, password=args.password, timeout=10.0
        ) as client:
            reply_client_id = client.client_id
            reply_topic = RESPONSE_PREFIX + reply_client_id
            if client.subscribe([(reply_topic, 1)]) == [SUBACK_FAILURE]:
                raise MqttError(
                    f"the broker refused the subscription to the reply topic {reply_topic!r}"
                    " (the user needs permission to subscribe to it)"
                )
            client.publish(CONTROL_QUEUE, payload, qos=1)
            reply = client.receive(client.timeout)
            if reply is None:
                raise MqttError(f"no reply from {args.host}:{args.port} in {client.timeout:g}s")
    except MqttError as error:
        print(f"telemq subs: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(reply.payload.decode("utf-8"))
    completion, reasons, extra = parse_reply(reply.payload)
    if not args.json:
        print(f"completion: {completion}")
        for reason in reasons:
            details = " ".join(f"{k}={v!r}" for k, v in reason.properties.items())
            print(f"  reason {reason.code} {details}".rstrip())
        for key, values in extra.items():
            if key == "Subscriptions":
                continue
            shown_values = [iso_time(v) for v in values] if key in TIMES else values
            print(f"  {key}: {', '.join(shown_values)}")
        listed = json.loads(reply.payload).get("pscr", {}).get("Subscriptions", [])
        # Not the subscription this tool made to read the reply (its own session's).
        listed = [a for a in listed if a.get("QName") != [reply_client_id]]
        # A subscriber's first, then, apart, the proxies neighbour brokers asked for.
        for heading, proxies in (("subscription", False), ("proxy subscription", True)):
            shown = [a for a in listed if ("Proxy" in a) == proxies]
            for index, attributes in enumerate(shown):
                print(f"{heading} {index + 1}:")
                for key, values in attributes.items():
                    shown_values = [iso_time(v) for v in values] if key in TIMES else values
                    print(f"  {key}: {', '.join(shown_values)}")
    return {"ok": 0, "warning": 1}.get(completion, 2)


# Attributes that are UTC seconds on the wire (ListSubs, FullResp), shown as ISO-8601.
TIMES = frozenset({"Expiry", "CreationTime"})


def iso_time(value: str) -> str:
    """UTC seconds as ISO-8601 UTC to the millisecond (`2026-11-25T21:58:03.512Z`); a value
    that is not a number is shown as it came."""
    try:
        moment = datetime.datetime.fromtimestamp(float(value), datetime.UTC)
    except (ValueError, OverflowError, OSError):
        return value
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
