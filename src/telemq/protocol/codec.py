"""Bytes <-> packets for MQTT 3.1, 3.1.1 and 5.0.

`Decoder.feed(data)` takes any split of the byte stream and returns every packet
completed by `data`; it raises `MalformedPacket`, naming the problem, for bytes
that can never become a valid packet (the caller closes the connection). The
size of a packet is checked from its fixed header, before its body is
buffered, so a peer cannot make the broker buffer more than the maximum packet
size.

`encode(packet)` is the inverse. `encode_publish` is the hot-path encoder used
by the broker, which encodes a publication once and reuses the bytes for every
subscriber that receives the same QoS.

MQTT 5.0 lives in `codec5`: the decoder reads a level-5 stream with the table of
`codec5.DECODERS_5`, chosen once per `feed` from the level (which a CONNECT sets), and
`encode(packet, 5)` hands over to `codec5.encode5`; nothing of 3.1/3.1.1 tests for level 5
per packet. The primitives both share (remaining length, strings, the body reader, the
memory of valid topic names) are in `wire`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .codec5 import DECODERS_5, decode_connect5, encode5, encode_connect5, encode_publish5
from .errors import MalformedPacket
from .packets import (
    PROTOCOL_NAMES,
    Auth,
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
from .topics import topic_name_error
from .wire import MAX_PACKET_SIZE, MAX_REMAINING_LENGTH, encode_remaining_length
from .wire import Reader as _Reader
from .wire import check_flags as _check_flags
from .wire import check_topic_name as _check_topic_name
from .wire import encode_binary as _binary
from .wire import encode_string as _string
from .wire import read_packet_id as _packet_id
from .wire import zero_packet_id as _zero_packet_id

__all__ = [  # with what moved to `wire` and is still imported from here
    "MAX_PACKET_SIZE",
    "MAX_REMAINING_LENGTH",
    "PINGRESP_BYTES",
    "Decoder",
    "decode_packet",
    "encode",
    "encode_ack",
    "encode_publish",
    "encode_publish5",
    "encode_remaining_length",
]

_MQTT_5: Final = 5
_PRIVATE_LEVELS: Final = (0x83, 0x84)  # 0x80 | 3.1 or 3.1.1: a bridge's CONNECT


# ---------------------------------------------------------------------------
# Encoding


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
    if level == _MQTT_5:
        return encode_connect5(packet)
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
    level_byte = 0x80 | level if packet.bridge else level
    variable = _string(name) + bytes((level_byte, flags)) + packet.keepalive.to_bytes(2, "big")
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


def encode(packet: Packet, protocol_level: int = ProtocolLevel.MQTT_3_1_1) -> bytes:
    """Serialize any packet for a connection of `protocol_level` (3 and 4 write the same
    bytes, and ignore the fields of 5.0). A CONNECT is written for its own level, with the
    protocol name that goes with it."""
    if protocol_level == _MQTT_5 and type(packet) is not Connect:
        return encode5(packet)
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
        case Auth():
            raise ValueError("AUTH exists only in MQTT 5.0")
    raise TypeError(f"not an MQTT packet: {packet!r}")


PINGRESP_BYTES = b"\xd0\x00"


# ---------------------------------------------------------------------------
# Decoding


def _decode_connect(first: int, body: bytes, level: int) -> Connect:
    """CONNECT, for an owner that speaks MQTT 3.1/3.1.1 only (see `Decoder`)."""
    return _read_connect(first, body, False)


def _decode_connect_mqtt5(first: int, body: bytes, level: int) -> Connect:
    """CONNECT, for an owner that speaks MQTT 5.0 as well."""
    return _read_connect(first, body, True)


def _read_connect(first: int, body: bytes, mqtt5: bool) -> Connect:
    _check_flags(first, 0, ProtocolLevel.MQTT_3_1_1, "CONNECT")
    reader = _Reader(body, "CONNECT")
    protocol_name = reader.string("protocol name")
    protocol_level = reader.byte()
    if protocol_name not in ("MQTT", "MQIsdp"):
        raise MalformedPacket(f"CONNECT: unknown protocol name {protocol_name!r}")
    bridge = protocol_level in _PRIVATE_LEVELS  # a bridge (Mosquitto, RSMB): 0x80 | level
    if bridge:
        protocol_level &= 0x7F
    if protocol_level == _MQTT_5 and protocol_name == "MQTT":
        if mqtt5:
            return decode_connect5(reader)
        try:
            return decode_connect5(reader)
        except MalformedPacket:
            # An owner without 5.0 answers CONNACK 1 whatever follows the level byte
            # (MQTT 3.1.1 [MQTT-3.1.2-2]): the stub below.
            pass
    if protocol_level not in (ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1):
        # Not ours to parse further: the connection answers CONNACK 1 and closes (a name
        # other than "MQTT" with level 5 is another protocol's, MQTT 5.0 [MQTT-3.1.2-1]).
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
        bridge=bridge,
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
            raise _zero_packet_id("PUBLISH")
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
        raise _zero_packet_id(name)
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


_DECODERS: Final[dict[int, Callable[[int, bytes, int], Packet]]] = {
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
# Level 5: codec5's decoders, with CONNECT and the pings of 3.1.1. Then both tables again
# for an owner that speaks 5.0, whose CONNECT of level 5 is never the stub (`Decoder`).
_DECODERS_5: Final[dict[int, Callable[[int, bytes, int], Packet]]] = {**_DECODERS, **DECODERS_5}
_DECODERS_MQTT5: Final = {**_DECODERS, PacketType.CONNECT: _decode_connect_mqtt5}
_DECODERS_5_MQTT5: Final = {**_DECODERS_5, PacketType.CONNECT: _decode_connect_mqtt5}


def decode_packet(
    data: bytes, protocol_level: int = ProtocolLevel.MQTT_3_1_1, mqtt5: bool = False
) -> Packet:
    """Decode exactly one whole packet (for tests and tools; `mqtt5` as for `Decoder`)."""
    decoder = Decoder(protocol_level=protocol_level, mqtt5=mqtt5)
    packets = decoder.feed(data)
    if len(packets) != 1 or decoder.buffered:
        raise MalformedPacket(
            f"expected exactly one packet, got {len(packets)} and {decoder.buffered} extra bytes"
        )
    return packets[0]


# `Decoder._buffer` of every decoder with no bytes waiting (most connections, most of the
# time): shared, so never written to.
NO_BYTES_WAITING: Final = bytearray()


class Decoder:
    """Incremental decoder: feed it bytes as they arrive, get whole packets back.

    After a `MalformedPacket` the decoder is in an undefined state: the
    connection must be closed, which is what MQTT requires anyway.

    The packets of levels 3 and 4 are read with one table, those of level 5 with another
    (`codec5`), picked at each `feed` from `protocol_level`, which a CONNECT of level 3, 4
    or 5 sets for the packets after it.

    `mqtt5` says whether the owner speaks MQTT 5.0. A level-5 CONNECT is decoded in full
    either way; one that does not parse is a `MalformedPacket` for a 5.0 owner, but for an
    owner without 5.0 the stub `Connect` of any unsupported level (client_id "", only the
    protocol name and level read), since such a server answers every level-5 CONNECT with
    CONNACK 1 whatever follows its level byte (MQTT 3.1.1 [MQTT-3.1.2-2]).
    """

    __slots__ = ("_buffer", "max_packet_size", "mqtt5", "protocol_level")

    def __init__(
        self,
        max_packet_size: int = MAX_PACKET_SIZE,
        protocol_level: int = ProtocolLevel.MQTT_3_1_1,
        mqtt5: bool = False,
    ) -> None:
        # The shared empty until bytes wait: replaced, never written to (`append`, `feed`).
        self._buffer = NO_BYTES_WAITING
        self.max_packet_size = max_packet_size
        # Until CONNECT is seen the strict 3.1.1 rules apply; set to the
        # connection's level afterwards.
        self.protocol_level = protocol_level
        self.mqtt5 = mqtt5  # which tables (`_DECODERS...`): a flag, not two references

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
        if self._buffer is NO_BYTES_WAITING:
            self._buffer = bytearray(data)
        else:
            self._buffer += data

    def feed_partial(
        self, data: bytes, stop_at_handshake: bool = False, max_packets: int = 0
    ) -> tuple[list[Packet], MalformedPacket | None]:
        """Like `feed`, but returns the packets decoded before a malformed one with the error.

        With `stop_at_handshake`, decoding stops after a CONNECT or an AUTH and the rest
        stays buffered: what follows is only read once the server has answered it. With
        `max_packets` (0: no limit), decoding stops after that many packets and the rest
        stays buffered for the next call, so that one read of a flood is handled in slices.
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
        # The table of the level, and the first byte of the PUBLISH that keeps its frame
        # (none at level 5: -1). A literal 5, not `_MQTT_5`: no global lookup per feed.
        mqtt5 = self.mqtt5
        if level == 5:
            decoders = _DECODERS_5_MQTT5 if mqtt5 else _DECODERS_5
            plain = -1
        else:
            decoders = _DECODERS_MQTT5 if mqtt5 else _DECODERS
            plain = 0x30
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
                        f"of {self.max_packet_size} bytes",
                        0x95,  # Packet too large
                    )
                if end > size:
                    break
                packet: Packet
                if first == plain:  # plain QoS 0 PUBLISH: keep its bytes to forward as they are
                    packet = _decode_plain_publish(bytes(view[pos:end]), start - pos)
                else:
                    decoder = decoders.get(first >> 4)
                    if decoder is None:
                        raise MalformedPacket(f"reserved packet type {first >> 4}")
                    packet = decoder(first, bytes(view[start:end]), level)
                packets.append(packet)
                pos = end
                if type(packet) is Connect:
                    if packet.protocol_level in (3, 4, 5):
                        level = self.protocol_level = packet.protocol_level
                        if level == 5:
                            decoders = _DECODERS_5_MQTT5 if mqtt5 else _DECODERS_5
                            plain = -1
                        else:
                            decoders = _DECODERS_MQTT5 if mqtt5 else _DECODERS
                            plain = 0x30
                    if stop_at_handshake:
                        break
                elif stop_at_handshake and type(packet) is Auth:
                    break
                if len(packets) == max_packets:
                    break  # the budget: the rest waits in the buffer
        except MalformedPacket as problem:
            error = problem
        finally:
            if buffer:
                if pos == size:
                    self._buffer = NO_BYTES_WAITING  # frees what a large packet took
                else:
                    del buffer[:pos]
            elif pos < size:
                if buffer is NO_BYTES_WAITING:
                    self._buffer = bytearray(data[pos:])
                else:
                    buffer += data[pos:]
        return packets, error
