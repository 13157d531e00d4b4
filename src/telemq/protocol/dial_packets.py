"""What the client role of a connection writes and reads that the server role does not.

Theory of operation
-------------------
`DialConnection` (dialer.py) is a `Connection` that dials: it writes a CONNECT and reads a
CONNACK, sends SUBSCRIBE and UNSUBSCRIBE for a bridge, and may re-encode what it forwards
under a bridge's remote topic names. The pure parts of that live here, functions of their
arguments alone:

- the CONNECT that states the dialer's MQTT 5.0 limits, and the limits it holds the server
  to (`stated_limits`);
- the size of the first packet, read from its fixed header before CONNACK
  (`packet_size`);
- how a refusing CONNACK or a server's DISCONNECT is named for the log (`connack_refusal`,
  `reason_label`, `server_details`) and as a `ReasonCode` (`known_reason`);
- a SUBSCRIBE's options byte (`subscription_options`) and the check of its filters;
- the topic, payload and RETAIN of a shared 3.1/3.1.1 QoS 0 frame, to encode it again
  under another name (`split_frame_qos0`).

Nothing here reads a clock or keeps state.
"""

from __future__ import annotations

import dataclasses

from .packets import (
    NO_LOCAL,
    RETAIN_AS_PUBLISHED,
    RETAIN_HANDLING_SHIFT,
    Connect,
    ConnectReturnCode,
)
from .peer5 import MAX_MQTT_PACKET, ServerLimits5
from .property_table import Properties
from .reasons import REFUSAL_REASONS, ReasonCode
from .topics import topic_filter_error

_MQTT_5 = 5


def subscription_options(
    qos: int,
    *,
    no_local: bool = False,
    retain_as_published: bool = False,
    retain_handling: int = 0,
) -> int:
    """The MQTT 5.0 subscription options byte of one topic filter (section 3.8.3.1).
    `retain_handling`: 0 sends retained messages, 1 sends them only for a new subscription,
    2 never sends them."""
    if qos not in (0, 1, 2):
        raise ValueError(f"QoS must be 0, 1 or 2, got {qos}")
    if retain_handling not in (0, 1, 2):
        raise ValueError(f"retain handling must be 0, 1 or 2, got {retain_handling}")
    return (
        qos
        | (NO_LOCAL if no_local else 0)
        | (RETAIN_AS_PUBLISHED if retain_as_published else 0)
        | retain_handling << RETAIN_HANDLING_SHIFT
    )


def stated_limits(
    connect: Connect, limits: ServerLimits5, max_packet_size: int
) -> tuple[Connect, ServerLimits5]:
    """The CONNECT stating the dialer's limits (those its properties leave out, from
    `limits` and `max_packet_size`), and the limits it states, to hold the server to."""
    props = connect.properties
    stated = Properties() if props is None else dataclasses.replace(props)
    if stated.receive_maximum is None and limits.receive_maximum < 65535:
        stated.receive_maximum = limits.receive_maximum
    if stated.topic_alias_maximum is None and limits.topic_alias_maximum:
        stated.topic_alias_maximum = limits.topic_alias_maximum
    if stated.maximum_packet_size is None and max_packet_size < MAX_MQTT_PACKET:
        stated.maximum_packet_size = max_packet_size
    own = dataclasses.replace(
        limits,
        receive_maximum=65535 if stated.receive_maximum is None else stated.receive_maximum,
        topic_alias_maximum=stated.topic_alias_maximum or 0,
        maximum_packet_size=(
            MAX_MQTT_PACKET if stated.maximum_packet_size is None else stated.maximum_packet_size
        ),
    )
    stating = connect.copy()
    stating.properties = None if stated.is_empty() else stated
    return stating, own


def packet_size(data: bytearray) -> int:
    """The size of the packet `data` begins with, read from its fixed header: 0 while the
    header is incomplete, -1 for a remaining length longer than 4 bytes."""
    length = 0
    shift = 0
    for index in range(1, min(len(data), 5)):
        byte = data[index]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return index + 1 + length
        shift += 7
    return -1 if len(data) >= 5 else 0


def split_frame_qos0(frame: bytes) -> tuple[bytes, bytes, bool]:
    """Topic, payload and RETAIN of an encoded 3.1/3.1.1 QoS 0 PUBLISH."""
    at = 1
    while frame[at] & 0x80:  # the remaining length: 1 to 4 bytes
        at += 1
    at += 1
    length = frame[at] << 8 | frame[at + 1]
    return frame[at + 2 : at + 2 + length], frame[at + 2 + length :], bool(frame[0] & 0x01)


def check_filter(topic_filter: str) -> None:
    """ValueError for a topic filter the dialer may not send."""
    problem = topic_filter_error(topic_filter)
    if problem is not None:
        raise ValueError(f"invalid topic filter {topic_filter!r}: {problem}")


def known_reason(code: int) -> ReasonCode:
    """`code` as a `ReasonCode`, or "unspecified error" for one it does not name."""
    try:
        return ReasonCode(code)
    except ValueError:
        return ReasonCode.UNSPECIFIED_ERROR


def reason_label(code: int) -> str:
    """`0x87 not authorized`; the number alone for a code `ReasonCode` does not name."""
    try:
        return ReasonCode(code).label
    except ValueError:
        return f"0x{code:02X}"


def server_details(props: Properties | None) -> str:
    """What a 5.0 server adds to a refusal or a DISCONNECT, for the log."""
    if props is None:
        return ""
    text = f": {props.reason_string}" if props.reason_string else ""
    if props.server_reference:
        text += f" (server reference {props.server_reference!r})"
    return text


def connack_refusal(code: int, level: int, props: Properties | None) -> tuple[str, ReasonCode]:
    """A refusing CONNACK's code for the log ("CONNACK 5 not authorized", "CONNACK 0x87
    not authorized: ...") and as a `ReasonCode`."""
    if level == _MQTT_5:
        return f"CONNACK {reason_label(code)}{server_details(props)}", known_reason(code)
    try:
        return_code = ConnectReturnCode(code)
    except ValueError:
        return f"CONNACK {code} (unknown return code)", ReasonCode.UNSPECIFIED_ERROR
    name = return_code.name.lower().replace("_", " ")
    return f"CONNACK {code} {name}", REFUSAL_REASONS.get(return_code, ReasonCode.UNSPECIFIED_ERROR)
