"""Bytes <-> packets for MQTT 3.1 and 3.1.1.

`Decoder.feed(data)` takes any split of the byte stream and returns every packet
completed by `data`; it raises `MalformedPacket`, naming the problem, for bytes
that can never become a valid packet (the caller closes the connection). The
size of a packet is checked from its fixed header, before its body is
buffered, so a peer cannot make the broker buffer more than the maximum packet
size.

`encode(packet)` is the inverse. `encode_publish` is the hot-path encoder used
by the broker, which encodes a publication once and reuses the bytes for every
subscriber that receives the same QoS.

PUBLISH topic names are checked once per distinct name: the names found valid are
remembered (`_VALID_TOPICS`, bounded), since traffic repeats a few names and the
full check (control characters above all) costs more per name than a dict lookup,
whose hash the broker's routing then reuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .errors import MalformedPacket
from .packets import (
    PROTOCOL_NAMES,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    ProtocolLevel,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)
from .topics import forbidden_character, topic_name_error

# PUBLISH topic names already found valid. Final: a C static in the compiled build, where
# a plain module global would cost a dictionary lookup of its name per packet.
_VALID_TOPICS: Final[dict[str, None]] = {}
_VALID_TOPICS_KEPT: Final = 16384  # beyond this many the memory starts again (a flood of names)


def _check_topic_name(topic: str) -> None:
    """Raise `MalformedPacket` for an invalid PUBLISH topic name (see the module docstring)."""
    if topic in _VALID_TOPICS:
        return
    problem = topic_name_error(topic)
    if problem is not None:
        raise MalformedPacket(f"PUBLISH: {problem}")
    if len(_VALID_TOPICS) >= _VALID_TOPICS_KEPT:
        _VALID_TOPICS.clear()
    _VALID_TOPICS[topic] = None


MAX_REMAINING_LENGTH = 268_435_455
MAX_PACKET_SIZE = MAX_REMAINING_LENGTH + 5  # fixed header byte + 4 length bytes


# ---------------------------------------------------------------------------
# Encoding


def encode_remaining_length(length: int) -> bytes:
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


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return len(data).to_bytes(2, "big") + data


def _binary(value: bytes) -> bytes:
    return len(value).to_bytes(2, "big") + value


def encode_publish(
    topic: bytes, payload: bytes, qos: int, retain: bool, dup: bool, packet_id: int
) -> bytes:
    """Encode a PUBLISH from an already UTF-8 encoded topic."""
    header = 0x30 | (qos << 1) | (1 if retain else 0) | (0x08 if dup else 0)
    if qos:
        variable = len(topic).to_bytes(2, "big") + topic + packet_id.to_bytes(2, "big")
    else:
        variable = len(topic).to_bytes(2, "big") + topic
    length = len(variable) + len(payload)
    if length < 128:
        return bytes((header, length)) + variable + payload
    return bytes((header,)) + encode_remaining_length(length) + variable + payload


def _encode_connect(packet: Connect) -> bytes:
    level = packet.protocol_level
    name = PROTOCOL_NAMES.get(level, packet.protocol_name)
    flags = 0
    if packet.clean_session:
        flags |= 0x02
    payload = _string(packet.client_id)
    if packet.will is not None:
        flags |= 0x04 | (packet.will.qos << 3) | (0x20 if packet.will.retain else 0)
        payload += _string(packet.will.topic) + _binary(packet.will.payload)
    if packet.username is not None:
        flags |= 0x80
        payload += _string(packet.username)
    if packet.password is not None:
        flags |= 0x40
        payload += _binary(packet.password)
    variable = _string(name) + bytes((level, flags)) + packet.keepalive.to_bytes(2, "big")
    body = variable + payload
    return b"\x10" + encode_remaining_length(len(body)) + body


def encode_ack(packet_type: PacketType, packet_id: int) -> bytes:
    """PUBACK, PUBREC, PUBREL (flags 0010) or PUBCOMP for `packet_id`, without a packet
    object: two or three of these go out per QoS 1/2 message."""
    return _id_packet(
        packet_type << 4 | (0x02 if packet_type is PacketType.PUBREL else 0), packet_id
    )


def _id_packet(first_byte: int, packet_id: int) -> bytes:
    if not 0 <= packet_id <= 0xFFFF:
        raise ValueError(f"packet identifier {packet_id} is out of range")
    return bytes((first_byte, 2, packet_id >> 8, packet_id & 0xFF))


def encode(packet: Packet) -> bytes:
    """Serialize any packet (for CONNECT, the protocol name follows the level)."""
    match packet:
        case Publish():
            return encode_publish(
                packet.topic.encode("utf-8"),
                packet.payload,
                packet.qos,
                packet.retain,
                packet.dup,
                packet.packet_id,
            )
        case PubAck():
            return _id_packet(0x40, packet.packet_id)
        case PubRec():
            return _id_packet(0x50, packet.packet_id)
        case PubRel():
            return _id_packet(0x6A if packet.dup else 0x62, packet.packet_id)
        case PubComp():
            return _id_packet(0x70, packet.packet_id)
        case ConnAck():
            return bytes((0x20, 2, 1 if packet.session_present else 0, packet.return_code))
        case Connect():
            return _encode_connect(packet)
        case Subscribe():
            body = packet.packet_id.to_bytes(2, "big") + b"".join(
                _string(topic) + bytes((qos,)) for topic, qos in packet.topics
            )
            first = 0x8A if packet.dup else 0x82
            return bytes((first,)) + encode_remaining_length(len(body)) + body
        case SubAck():
            body = packet.packet_id.to_bytes(2, "big") + bytes(packet.return_codes)
            return b"\x90" + encode_remaining_length(len(body)) + body
        case Unsubscribe():
            body = packet.packet_id.to_bytes(2, "big") + b"".join(
                _string(topic) for topic in packet.topics
            )
            first = 0xAA if packet.dup else 0xA2
            return bytes((first,)) + encode_remaining_length(len(body)) + body
        case UnsubAck():
            return _id_packet(0xB0, packet.packet_id)
        case PingReq():
            return b"\xc0\x00"
        case PingResp():
            return b"\xd0\x00"
        case Disconnect():
            return b"\xe0\x00"
    raise TypeError(f"not an MQTT packet: {packet!r}")


PINGRESP_BYTES = b"\xd0\x00"


# ---------------------------------------------------------------------------
# Decoding


class _Reader:
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


def _packet_id(reader: _Reader) -> int:
    packet_id = reader.uint16()
    if packet_id == 0:
        raise MalformedPacket(f"{reader.what}: packet identifier 0 is invalid")
    return packet_id


def _check_flags(first: int, expected: int, level: int, name: str) -> None:
    flags = first & 0x0F
    if level >= ProtocolLevel.MQTT_3_1_1:
        if flags != expected:
            raise MalformedPacket(
                f"{name}: reserved flag bits are {flags:04b}, must be {expected:04b}"
            )
    elif expected == 0b0010 and (flags & 0b0110) != 0b0010:
        # MQTT 3.1 sends these as QoS 1 messages; DUP may be set on a retry.
        raise MalformedPacket(f"{name}: QoS bits must be 01 in MQTT 3.1, got flags {flags:04b}")


def _decode_connect(first: int, body: bytes, level: int) -> Connect:
    _check_flags(first, 0, ProtocolLevel.MQTT_3_1_1, "CONNECT")
    reader = _Reader(body, "CONNECT")
    protocol_name = reader.string("protocol name")
    protocol_level = reader.byte()
    if protocol_name not in ("MQTT", "MQIsdp"):
        raise MalformedPacket(f"CONNECT: unknown protocol name {protocol_name!r}")
    if protocol_level not in (ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1):
        # Not ours to parse further: the connection answers CONNACK 1 and closes.
        return Connect(client_id="", protocol_level=protocol_level, protocol_name=protocol_name)
    if PROTOCOL_NAMES[protocol_level] != protocol_name:
        raise MalformedPacket(
            f"CONNECT: protocol name {protocol_name!r} does not go with level {protocol_level}"
        )
    flags = reader.byte()
    if flags & 0x01:
        raise MalformedPacket("CONNECT: reserved flag bit 0 is set")
    keepalive = reader.uint16()
    client_id = reader.string("client identifier")
    will: Will | None = None
    will_qos = (flags >> 3) & 0x03
    will_retain = bool(flags & 0x20)
    if flags & 0x04:
        if will_qos == 3:
            raise MalformedPacket("CONNECT: will QoS 3 is invalid")
        will_topic = reader.string("will topic")
        problem = topic_name_error(will_topic)
        if problem:
            raise MalformedPacket(f"CONNECT: will topic: {problem}")
        will = Will(will_topic, reader.binary(), will_qos, will_retain)
    elif will_qos or will_retain:
        raise MalformedPacket("CONNECT: will QoS/retain set without the will flag")
    username: str | None = None
    password: bytes | None = None
    if flags & 0x80:
        username = reader.string("user name")
    if flags & 0x40:
        if username is None:
            raise MalformedPacket("CONNECT: password flag set without the user name flag")
        password = reader.binary()
    if reader.remaining() and protocol_level >= ProtocolLevel.MQTT_3_1_1:
        raise MalformedPacket(f"CONNECT: {reader.remaining()} unexpected bytes at the end")
    return Connect(
        client_id=client_id,
        protocol_level=protocol_level,
        clean_session=bool(flags & 0x02),
        keepalive=keepalive,
        will=will,
        username=username,
        password=password,
        protocol_name=protocol_name,
    )


def _decode_publish(first: int, body: bytes, level: int) -> Publish:
    qos = (first >> 1) & 0x03
    if qos == 3:
        raise MalformedPacket("PUBLISH: QoS 3 is invalid")
    dup = bool(first & 0x08)
    if dup and qos == 0 and level >= ProtocolLevel.MQTT_3_1_1:
        raise MalformedPacket("PUBLISH: DUP must be 0 for QoS 0")
    # Inline string read: this is the hot path.
    if len(body) < 2:
        raise MalformedPacket("PUBLISH: packet ends early")
    topic_length = (body[0] << 8) | body[1]
    end = 2 + topic_length
    if end > len(body):
        raise MalformedPacket("PUBLISH: topic runs past the end of the packet")
    try:
        topic = body[2:end].decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket("PUBLISH: topic name is not valid UTF-8") from None
    _check_topic_name(topic)
    packet_id = 0
    if qos:
        if end + 2 > len(body):
            raise MalformedPacket("PUBLISH: packet ends before the packet identifier")
        packet_id = (body[end] << 8) | body[end + 1]
        if packet_id == 0:
            raise MalformedPacket("PUBLISH: packet identifier 0 is invalid")
        end += 2
    return Publish(topic, body[end:], qos, bool(first & 0x01), dup, packet_id)


def _decode_plain_publish(frame: bytes, start: int) -> Publish:
    """`_decode_publish` for the most common PUBLISH, first byte 0x30 (QoS 0, no DUP, no
    RETAIN), read in place from its whole `frame` (body from `start`), which it keeps."""
    size = len(frame)
    if size - start < 2:
        raise MalformedPacket("PUBLISH: packet ends early")
    end = start + 2 + ((frame[start] << 8) | frame[start + 1])
    if end > size:
        raise MalformedPacket("PUBLISH: topic runs past the end of the packet")
    try:
        topic = frame[start + 2 : end].decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket("PUBLISH: topic name is not valid UTF-8") from None
    _check_topic_name(topic)
    return Publish(topic, frame[end:], 0, False, False, 0, frame)


def _id_body(body: bytes, name: str) -> int:
    """The packet id that is the whole body of an acknowledgement (without a reader)."""
    if len(body) != 2:
        raise MalformedPacket(f"{name}: remaining length must be 2, got {len(body)}")
    packet_id = (body[0] << 8) | body[1]
    if packet_id == 0:
        raise MalformedPacket(f"{name}: packet identifier 0 is invalid")
    return packet_id


def _decode_id_only(
    cls: type[PubAck | PubRec | PubComp | UnsubAck], name: str
) -> Callable[[int, bytes, int], Packet]:
    def decode(first: int, body: bytes, level: int) -> Packet:
        # Two of these per QoS 1/2 message: the common case reads no more than it must.
        if first & 0x0F:
            _check_flags(first, 0, level, name)
        return cls(_id_body(body, name))

    return decode


def _decode_pubrel(first: int, body: bytes, level: int) -> PubRel:
    if first != 0x62:  # anything but the usual flags 0010 is checked for the level
        _check_flags(first, 0b0010, level, "PUBREL")
    return PubRel(_id_body(body, "PUBREL"), dup=bool(first & 0x08))


def _decode_subscribe(first: int, body: bytes, level: int) -> Subscribe:
    _check_flags(first, 0b0010, level, "SUBSCRIBE")
    reader = _Reader(body, "SUBSCRIBE")
    packet_id = _packet_id(reader)
    topics: list[tuple[str, int]] = []
    while reader.remaining():
        topic_filter = reader.string("topic filter")
        if not topic_filter:
            raise MalformedPacket("SUBSCRIBE: empty topic filter [MQTT-4.7.3-1]")
        options = reader.byte()
        if options & 0xFC and level >= ProtocolLevel.MQTT_3_1_1:
            raise MalformedPacket("SUBSCRIBE: reserved bits of the requested QoS byte are set")
        qos = options & 0x03
        if qos == 3:
            raise MalformedPacket("SUBSCRIBE: requested QoS 3 is invalid")
        topics.append((topic_filter, qos))
    if not topics:
        raise MalformedPacket("SUBSCRIBE: no topic filter")
    return Subscribe(packet_id, topics, dup=bool(first & 0x08))


def _decode_unsubscribe(first: int, body: bytes, level: int) -> Unsubscribe:
    _check_flags(first, 0b0010, level, "UNSUBSCRIBE")
    reader = _Reader(body, "UNSUBSCRIBE")
    packet_id = _packet_id(reader)
    topics: list[str] = []
    while reader.remaining():
        topic_filter = reader.string("topic filter")
        if not topic_filter:
            raise MalformedPacket("UNSUBSCRIBE: empty topic filter [MQTT-4.7.3-1]")
        topics.append(topic_filter)
    if not topics:
        raise MalformedPacket("UNSUBSCRIBE: no topic filter")
    return Unsubscribe(packet_id, topics, dup=bool(first & 0x08))


def _decode_connack(first: int, body: bytes, level: int) -> ConnAck:
    _check_flags(first, 0, level, "CONNACK")
    if len(body) != 2:
        raise MalformedPacket(f"CONNACK: remaining length must be 2, got {len(body)}")
    if body[0] & 0xFE:
        raise MalformedPacket("CONNACK: reserved acknowledge flags are set")
    return ConnAck(return_code=body[1], session_present=bool(body[0] & 0x01))


def _decode_suback(first: int, body: bytes, level: int) -> SubAck:
    _check_flags(first, 0, level, "SUBACK")
    reader = _Reader(body, "SUBACK")
    packet_id = _packet_id(reader)
    codes = list(reader.rest())
    if not codes:
        raise MalformedPacket("SUBACK: no return code")
    return SubAck(packet_id, codes)


def _empty(
    cls: type[PingReq | PingResp | Disconnect], name: str
) -> Callable[[int, bytes, int], Packet]:
    def decode(first: int, body: bytes, level: int) -> Packet:
        _check_flags(first, 0, level, name)
        if body:
            raise MalformedPacket(f"{name}: remaining length must be 0, got {len(body)}")
        return cls()

    return decode


_DECODERS: dict[int, Callable[[int, bytes, int], Packet]] = {
    PacketType.CONNECT: _decode_connect,
    PacketType.CONNACK: _decode_connack,
    PacketType.PUBLISH: _decode_publish,
    PacketType.PUBACK: _decode_id_only(PubAck, "PUBACK"),
    PacketType.PUBREC: _decode_id_only(PubRec, "PUBREC"),
    PacketType.PUBREL: _decode_pubrel,
    PacketType.PUBCOMP: _decode_id_only(PubComp, "PUBCOMP"),
    PacketType.SUBSCRIBE: _decode_subscribe,
    PacketType.SUBACK: _decode_suback,
    PacketType.UNSUBSCRIBE: _decode_unsubscribe,
    PacketType.UNSUBACK: _decode_id_only(UnsubAck, "UNSUBACK"),
    PacketType.PINGREQ: _empty(PingReq, "PINGREQ"),
    PacketType.PINGRESP: _empty(PingResp, "PINGRESP"),
    PacketType.DISCONNECT: _empty(Disconnect, "DISCONNECT"),
}


def decode_packet(data: bytes, protocol_level: int = ProtocolLevel.MQTT_3_1_1) -> Packet:
    """Decode exactly one whole packet (for tests and tools)."""
    decoder = Decoder(protocol_level=protocol_level)
    packets = decoder.feed(data)
    if len(packets) != 1 or decoder.buffered:
        raise MalformedPacket(
            f"expected exactly one packet, got {len(packets)} and {decoder.buffered} extra bytes"
        )
    return packets[0]


class Decoder:
    """Incremental decoder: feed it bytes as they arrive, get whole packets back.

    After a `MalformedPacket` the decoder is in an undefined state: the
    connection must be closed, which is what MQTT requires anyway.
    """

    __slots__ = ("_buffer", "max_packet_size", "protocol_level")

    def __init__(
        self,
        max_packet_size: int = MAX_PACKET_SIZE,
        protocol_level: int = ProtocolLevel.MQTT_3_1_1,
    ) -> None:
        self._buffer = bytearray()
        self.max_packet_size = max_packet_size
        # Until CONNECT is seen the strict 3.1.1 rules apply; set to the
        # connection's level afterwards.
        self.protocol_level = protocol_level

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Packet]:
        """Every packet `data` completes; raises MalformedPacket for bad bytes."""
        packets, error = self.feed_partial(data)
        if error is not None:
            raise error
        return packets

    def append(self, data: bytes) -> None:
        """Buffer bytes without decoding them (while CONNECT awaits its answer)."""
        self._buffer += data

    def feed_partial(
        self, data: bytes, stop_after_connect: bool = False
    ) -> tuple[list[Packet], MalformedPacket | None]:
        """Like `feed`, but returns the packets decoded before a malformed one with the error.

        With `stop_after_connect`, decoding stops after a CONNECT and the rest stays
        buffered: what follows CONNECT is only read once the CONNECT is answered.
        """
        buffer = self._buffer
        if buffer:
            buffer += data
            view: bytes | bytearray = buffer
        else:
            view = data
        size = len(view)
        pos = 0
        packets: list[Packet] = []
        level = self.protocol_level
        decoders = _DECODERS
        error: MalformedPacket | None = None
        try:
            while size - pos >= 2:
                first = view[pos]
                # Remaining length: 1..4 bytes, 7 bits each, little-endian groups.
                index = pos + 1
                byte = view[index]
                length = byte & 0x7F
                if byte & 0x80:
                    shift = 7
                    while True:
                        index += 1
                        if index - pos > 4:
                            raise MalformedPacket(
                                "remaining length is longer than 4 bytes (bad remaining length)"
                            )
                        if index >= size:
                            index = -1
                            break
                        byte = view[index]
                        length |= (byte & 0x7F) << shift
                        if not byte & 0x80:
                            break
                        shift += 7
                    if index < 0:
                        break  # the length itself is not complete yet
                start = index + 1
                end = start + length
                if end - pos > self.max_packet_size:
                    raise MalformedPacket(
                        f"packet of {end - pos} bytes exceeds the maximum packet size "
                        f"of {self.max_packet_size} bytes"
                    )
                if end > size:
                    break
                decoder = decoders.get(first >> 4)
                if decoder is None:
                    raise MalformedPacket(f"reserved packet type {first >> 4}")
                packet: Packet
                if first == 0x30:  # plain QoS 0 PUBLISH: keep its bytes to forward as they are
                    packet = _decode_plain_publish(bytes(view[pos:end]), start - pos)
                else:
                    packet = decoder(first, bytes(view[start:end]), level)
                packets.append(packet)
                pos = end
                if type(packet) is Connect:
                    if packet.protocol_level in (3, 4):
                        level = self.protocol_level = packet.protocol_level
                    if stop_after_connect:
                        break
        except MalformedPacket as problem:
            error = problem
        finally:
            if buffer:
                del buffer[:pos]
            elif pos < size:
                buffer += data[pos:]
        return packets, error
