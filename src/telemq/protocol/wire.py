"""The wire primitives every protocol level shares: the remaining length, strings and binary
data (§1.5 of both specifications), a reader of one packet body, the fixed-header flag check,
and the memory of valid PUBLISH topic names.

`codec` (MQTT 3.1/3.1.1, the `Decoder`, `encode`) and `codec5` (MQTT 5.0) both build on
these; nothing here knows a packet type beyond its name for messages.
"""

from __future__ import annotations

from typing import Final

from .errors import MalformedPacket
from .packets import ProtocolLevel
from .reasons import ReasonCode
from .topics import forbidden_character, topic_name_error

MAX_REMAINING_LENGTH: Final = 268_435_455
MAX_PACKET_SIZE: Final = MAX_REMAINING_LENGTH + 5  # fixed header byte + 4 length bytes

# PUBLISH topic names already found valid: traffic repeats a few names, and the full check
# (control characters above all) costs more per name than a dict lookup, whose hash the
# broker's routing then reuses. Final: a C static in the compiled build, where a plain module
# global would cost a dictionary lookup of its name per packet.
VALID_TOPICS: Final[dict[str, None]] = {}
VALID_TOPICS_KEPT: Final = 16384  # beyond this many the memory starts again (a flood of names)


def check_topic_name(topic: str) -> None:
    """Raise `MalformedPacket` for an invalid PUBLISH topic name (see `VALID_TOPICS`)."""
    if topic in VALID_TOPICS:
        return
    problem = topic_name_error(topic)
    if problem is not None:
        raise MalformedPacket(f"PUBLISH: {problem}")
    if len(VALID_TOPICS) >= VALID_TOPICS_KEPT:
        VALID_TOPICS.clear()
    VALID_TOPICS[topic] = None


# ---------------------------------------------------------------------------
# Writing


def encode_remaining_length(length: int) -> bytes:
    """A Variable Byte Integer (the remaining length, and MQTT 5.0's property length)."""
    if length < 0 or length > MAX_REMAINING_LENGTH:
        raise ValueError(f"remaining length {length} out of range 0..{MAX_REMAINING_LENGTH}")
    if length < 128:
        return bytes((length,))
    out = bytearray()
    while True:
        digit = length & 0x7F
        length >>= 7
        if length:
            out.append(digit | 0x80)
        else:
            out.append(digit)
            return bytes(out)


def encode_string(value: str) -> bytes:
    data = value.encode("utf-8")
    return len(data).to_bytes(2, "big") + data


def encode_binary(value: bytes) -> bytes:
    return len(value).to_bytes(2, "big") + value


def frame(first_byte: int, body: bytes) -> bytes:
    """A whole packet: its first byte, the remaining length, `body`."""
    return bytes((first_byte,)) + encode_remaining_length(len(body)) + body


# ---------------------------------------------------------------------------
# Reading


class Reader:
    """Reads the variable header and payload of one packet body."""

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise MalformedPacket(f"{self.what}: packet ends early")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def uint16(self) -> int:
        pos = self.pos
        if pos + 2 > len(self.data):
            raise MalformedPacket(f"{self.what}: packet ends early")
        self.pos = pos + 2
        return (self.data[pos] << 8) | self.data[pos + 1]

    def binary(self) -> bytes:
        length = self.uint16()
        pos = self.pos
        if pos + length > len(self.data):
            raise MalformedPacket(
                f"{self.what}: field of {length} bytes runs past the end of the packet"
            )
        self.pos = pos + length
        return self.data[pos : pos + length]

    def string(self, field: str) -> str:
        raw = self.binary()
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedPacket(f"{self.what}: {field} is not valid UTF-8") from None
        if not value.isprintable():  # U+0000 and the control characters (`topics`)
            forbidden = forbidden_character(value)
            if forbidden is not None:
                raise MalformedPacket(f"{self.what}: {field} contains {forbidden}")
        return value

    def rest(self) -> bytes:
        value = self.data[self.pos :]
        self.pos = len(self.data)
        return value


def read_packet_id(reader: Reader) -> int:
    packet_id = reader.uint16()
    if packet_id == 0:
        raise zero_packet_id(reader.what)
    return packet_id


def zero_packet_id(what: str) -> MalformedPacket:
    """The error of packet identifier 0 where one is needed (§2.2.1): the packet parses,
    so it is a protocol error (0x82), not a malformed packet (§4.13), at every level."""
    return MalformedPacket(f"{what}: packet identifier 0 is invalid", ReasonCode.PROTOCOL_ERROR)


def check_flags(first: int, expected: int, level: int, name: str) -> None:
    """The fixed header's flag bits: exactly `expected` from 3.1.1 on; 3.1 checks the QoS of
    the packets it sends as QoS 1 messages (flags 0010) and nothing else."""
    flags = first & 0x0F
    if level >= ProtocolLevel.MQTT_3_1_1:
        if flags != expected:
            raise MalformedPacket(
                f"{name}: reserved flag bits are {flags:04b}, must be {expected:04b}"
            )
    elif expected == 0b0010 and (flags & 0b0110) != 0b0010:
        # MQTT 3.1 sends these as QoS 1 messages; DUP may be set on a retry.
        raise MalformedPacket(f"{name}: QoS bits must be 01 in MQTT 3.1, got flags {flags:04b}")
