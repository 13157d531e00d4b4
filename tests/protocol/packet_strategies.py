"""Hypothesis strategies for valid MQTT 3.1 / 3.1.1 / 5.0 packets, topic names and filters.

Strategies are built from the rules themselves (MQTT 3.1.1 §1.5.3, §2.3.1, §4.7; MQTT 5.0
chapter 3 and Table 2-4 for the properties), not from telemq's validators, so that the
validators can be tested against them.
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st

from telemq.protocol import (
    SUBACK_FAILURE,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PropertyContext,
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

PROTOCOL_NAMES = {3: "MQIsdp", 4: "MQTT", 5: "MQTT"}

# UTF-8 encodable text (no surrogates) without U+0000 and the control characters
# U+0001..U+001F, U+007F..U+009F, which close the connection (`telemq.protocol.topics`).
CONTROL_CHARACTERS = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))
_CHARS = st.characters(codec="utf-8", exclude_characters=CONTROL_CHARACTERS)
text = st.text(_CHARS, max_size=12)

# Topic levels: a few interesting fixed ones, plus arbitrary text without '/', '+', '#'.
_LEVEL_CHARS = st.characters(codec="utf-8", exclude_characters=CONTROL_CHARACTERS + "/+#")
topic_levels = st.one_of(
    st.sampled_from(["", "a", "b", "sport", "$SYS", "$x", " ", "é"]),
    st.text(_LEVEL_CHARS, max_size=6),
)


@st.composite
def topic_names(draw: st.DrawFn) -> str:
    """Valid PUBLISH topic names: at least one character, no wildcard, no U+0000."""
    name = "/".join(draw(st.lists(topic_levels, min_size=1, max_size=5)))
    return name or "/"


@st.composite
def topic_filters(draw: st.DrawFn) -> str:
    """Valid subscription filters: '+' fills whole levels, '#' only as a whole last level."""
    levels = draw(st.lists(st.one_of(topic_levels, st.just("+")), max_size=5))
    if not levels or draw(st.booleans()):
        levels.append("#")
    topic_filter = "/".join(levels)
    return topic_filter or "/"


packet_ids = st.integers(min_value=1, max_value=65535)
qos_levels = st.integers(min_value=0, max_value=2)
payloads = st.one_of(st.binary(max_size=40), st.binary(min_size=100, max_size=300))


@st.composite
def connects(draw: st.DrawFn, level: int) -> Connect:
    will = draw(
        st.none()
        | st.builds(
            Will,
            topic=topic_names(),
            payload=st.binary(max_size=20),
            qos=qos_levels,
            retain=st.booleans(),
        )
    )
    username = draw(st.none() | text)
    # A password needs a user name.
    password = None if username is None else draw(st.none() | st.binary(max_size=20))
    return Connect(
        client_id=draw(text),
        protocol_level=level,
        clean_session=draw(st.booleans()),
        keepalive=draw(st.integers(min_value=0, max_value=65535)),
        will=will,
        username=username,
        password=password,
        protocol_name=PROTOCOL_NAMES[level],
    )


@st.composite
def publishes(draw: st.DrawFn, level: int) -> Publish:
    qos = draw(qos_levels)
    # MQTT 3.1.1: DUP must be 0 for QoS 0; 3.1 tolerates it.
    dup = draw(st.booleans()) if qos or level == 3 else False
    return Publish(
        topic=draw(topic_names()),
        payload=draw(payloads),
        qos=qos,
        retain=draw(st.booleans()),
        dup=dup,
        packet_id=draw(packet_ids) if qos else 0,
    )


def _dup(level: int) -> st.SearchStrategy[bool]:
    """DUP on PUBREL/SUBSCRIBE/UNSUBSCRIBE exists only in 3.1 (sent as QoS 1 messages)."""
    return st.booleans() if level == 3 else st.just(False)


@functools.cache
def packet_strategies(level: int) -> dict[PacketType, st.SearchStrategy[Packet]]:
    """One strategy of valid packets per packet type, for one protocol level."""
    if level == 5:
        return packet_strategies_5()
    suback_codes = [0, 1, 2] if level == 3 else [0, 1, 2, SUBACK_FAILURE]
    return {
        PacketType.CONNECT: connects(level),
        PacketType.CONNACK: st.builds(
            ConnAck,
            return_code=st.integers(min_value=0, max_value=5),
            session_present=st.booleans() if level == 4 else st.just(False),
        ),
        PacketType.PUBLISH: publishes(level),
        PacketType.PUBACK: st.builds(PubAck, packet_ids),
        PacketType.PUBREC: st.builds(PubRec, packet_ids),
        PacketType.PUBREL: st.builds(PubRel, packet_ids, dup=_dup(level)),
        PacketType.PUBCOMP: st.builds(PubComp, packet_ids),
        PacketType.SUBSCRIBE: st.builds(
            Subscribe,
            packet_ids,
            st.lists(st.tuples(topic_filters(), qos_levels), min_size=1, max_size=4),
            dup=_dup(level),
        ),
        PacketType.SUBACK: st.builds(
            SubAck, packet_ids, st.lists(st.sampled_from(suback_codes), min_size=1, max_size=6)
        ),
        PacketType.UNSUBSCRIBE: st.builds(
            Unsubscribe,
            packet_ids,
            st.lists(topic_filters(), min_size=1, max_size=4),
            dup=_dup(level),
        ),
        PacketType.UNSUBACK: st.builds(UnsubAck, packet_ids),
        PacketType.PINGREQ: st.just(PingReq()),
        PacketType.PINGRESP: st.just(PingResp()),
        PacketType.DISCONNECT: st.just(Disconnect()),
    }


@functools.cache
def packets(level: int) -> st.SearchStrategy[Packet]:
    return st.one_of(*packet_strategies(level).values())


@functools.cache
def client_packets(level: int) -> st.SearchStrategy[Packet]:
    """What a connected client may send, except CONNECT and DISCONNECT."""
    strategies = packet_strategies(level)
    return st.one_of(
        *(
            strategies[kind]
            for kind in (
                PacketType.PUBLISH,
                PacketType.PUBACK,
                PacketType.PUBREC,
                PacketType.PUBREL,
                PacketType.PUBCOMP,
                PacketType.SUBSCRIBE,
                PacketType.UNSUBSCRIBE,
                PacketType.PINGREQ,
            )
        )
    )


# ---------------------------------------------------------------------------
# MQTT 5.0

# The reason codes chapter 3 lists for each packet (§3.2.2.2, §3.4.2.1, §3.5.2.1, §3.6.2.1,
# §3.7.2.1, §3.9.3, §3.11.3, §3.14.2.1 plus 0x8C, which Table 2-6 gives DISCONNECT, §3.15.2.1).
REASON_CODES_5: dict[PacketType, frozenset[int]] = {
    PacketType.CONNACK: frozenset(
        [
            *(0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C),
            *(0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F),
        ]
    ),
    PacketType.PUBACK: frozenset([0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99]),
    PacketType.PUBREC: frozenset([0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99]),
    PacketType.PUBREL: frozenset([0x00, 0x92]),
    PacketType.PUBCOMP: frozenset([0x00, 0x92]),
    PacketType.SUBACK: frozenset(
        [0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2]
    ),
    PacketType.UNSUBACK: frozenset([0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91]),
    PacketType.DISCONNECT: frozenset(
        [
            *(0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8C, 0x8D, 0x8E, 0x8F),
            *(0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E),
            *(0x9F, 0xA0, 0xA1, 0xA2),
        ]
    ),
    PacketType.AUTH: frozenset([0x00, 0x18, 0x19]),
}

_C = PropertyContext
_U16 = st.integers(min_value=0, max_value=0xFFFF)
_U32 = st.integers(min_value=0, max_value=0xFFFF_FFFF)
_BIT = st.integers(min_value=0, max_value=1)  # every Byte property is 0 or 1
_NON_ZERO_U16 = st.integers(min_value=1, max_value=0xFFFF)
_NON_ZERO_U32 = st.integers(min_value=1, max_value=0xFFFF_FFFF)
_BINARY = st.binary(max_size=8)
_REPLIES = {_C.PUBACK, _C.PUBREC, _C.PUBREL, _C.PUBCOMP, _C.SUBACK, _C.UNSUBACK}

# Table 2-4: each single-valued property (as its `Properties` field), a strategy of its valid
# values (§3.1.2.11, §3.2.2.3, §3.3.2.3), and the blocks that may carry it.
_PROPERTY_TABLE: list[tuple[str, st.SearchStrategy[object], set[PropertyContext]]] = [
    ("payload_format_indicator", _BIT, {_C.PUBLISH, _C.WILL}),
    ("message_expiry_interval", _U32, {_C.PUBLISH, _C.WILL}),
    ("content_type", text, {_C.PUBLISH, _C.WILL}),
    ("response_topic", topic_names(), {_C.PUBLISH, _C.WILL}),
    ("correlation_data", _BINARY, {_C.PUBLISH, _C.WILL}),
    ("session_expiry_interval", _U32, {_C.CONNECT, _C.CONNACK, _C.DISCONNECT}),
    ("assigned_client_identifier", text, {_C.CONNACK}),
    ("server_keep_alive", _U16, {_C.CONNACK}),
    ("authentication_method", text, {_C.CONNECT, _C.CONNACK, _C.AUTH}),
    ("authentication_data", _BINARY, {_C.CONNECT, _C.CONNACK, _C.AUTH}),
    ("request_problem_information", _BIT, {_C.CONNECT}),
    ("will_delay_interval", _U32, {_C.WILL}),
    ("request_response_information", _BIT, {_C.CONNECT}),
    ("response_information", text, {_C.CONNACK}),
    ("server_reference", text, {_C.CONNACK, _C.DISCONNECT}),
    ("reason_string", text, {_C.CONNACK, _C.DISCONNECT, _C.AUTH} | _REPLIES),
    ("receive_maximum", _NON_ZERO_U16, {_C.CONNECT, _C.CONNACK}),
    ("topic_alias_maximum", _U16, {_C.CONNECT, _C.CONNACK}),
    ("topic_alias", _NON_ZERO_U16, {_C.PUBLISH}),
    ("maximum_qos", _BIT, {_C.CONNACK}),
    ("retain_available", _BIT, {_C.CONNACK}),
    (
        "maximum_packet_size",
        st.integers(min_value=1, max_value=0xFFFF_FFFF),
        {_C.CONNECT, _C.CONNACK},
    ),
    ("wildcard_subscription_available", _BIT, {_C.CONNACK}),
    ("subscription_identifier_available", _BIT, {_C.CONNACK}),
    ("shared_subscription_available", _BIT, {_C.CONNACK}),
]
_SUBSCRIPTION_IDS = st.integers(min_value=1, max_value=268_435_455)


@st.composite
def properties_for(draw: st.DrawFn, context: PropertyContext) -> Properties | None:
    """Valid properties for one block, or None when the draw holds none (the decoder's
    `properties` for an empty block)."""
    fields: dict[str, object] = {}
    for name, values, carriers in _PROPERTY_TABLE:
        if context in carriers and draw(st.integers(min_value=0, max_value=3)) == 0:
            fields[name] = draw(values)
    if context is _C.CONNECT and "authentication_data" in fields:  # §3.1.2.11.10
        fields.setdefault("authentication_method", draw(text))
    if context in (_C.PUBLISH, _C.SUBSCRIBE):
        most = 3 if context is _C.PUBLISH else 1
        fields["subscription_identifiers"] = draw(st.lists(_SUBSCRIPTION_IDS, max_size=most))
    fields["user_properties"] = draw(st.lists(st.tuples(text, text), max_size=2))
    props = Properties(**fields)  # type: ignore[arg-type]
    return None if props.is_empty() else props


def _reasons(kind: PacketType) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(REASON_CODES_5[kind]))


@st.composite
def connects_5(draw: st.DrawFn) -> Connect:
    will = None
    if draw(st.booleans()):
        will = Will(
            draw(topic_names()),
            draw(st.binary(max_size=20)),
            draw(qos_levels),
            draw(st.booleans()),
            draw(properties_for(_C.WILL)),
        )
    return Connect(
        client_id=draw(text),
        protocol_level=5,
        clean_session=draw(st.booleans()),
        keepalive=draw(st.integers(min_value=0, max_value=65535)),
        will=will,
        username=draw(st.none() | text),
        password=draw(st.none() | st.binary(max_size=20)),  # no user name needed in 5.0
        protocol_name="MQTT",
        properties=draw(properties_for(_C.CONNECT)),
    )


@st.composite
def publishes_5(draw: st.DrawFn) -> Publish:
    qos = draw(qos_levels)
    props = draw(properties_for(_C.PUBLISH))
    aliased = props is not None and props.topic_alias is not None
    # With a topic alias the topic name may be empty (§3.3.2.1).
    topic = "" if aliased and draw(st.booleans()) else draw(topic_names())
    return Publish(
        topic,
        draw(payloads),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(packet_ids) if qos else 0,
        properties=props,
    )


def _acks_5(
    cls: type[PubAck | PubRec | PubRel | PubComp], kind: PacketType
) -> st.SearchStrategy[Packet]:
    return st.builds(
        cls, packet_ids, reason_code=_reasons(kind), properties=properties_for(_C(kind))
    )


@st.composite
def subscription_options(draw: st.DrawFn) -> int:
    """Maximum QoS, No Local, Retain As Published, Retain Handling 0-2 (§3.8.3.1)."""
    no_local = draw(st.booleans())
    retain_as_published = draw(st.booleans())
    retain_handling = draw(st.integers(min_value=0, max_value=2))
    return draw(qos_levels) | no_local << 2 | retain_as_published << 3 | retain_handling << 4


@functools.cache
def packet_strategies_5() -> dict[PacketType, st.SearchStrategy[Packet]]:
    return {
        PacketType.CONNECT: connects_5(),
        PacketType.CONNACK: st.builds(
            ConnAck,
            _reasons(PacketType.CONNACK),
            st.booleans(),
            properties_for(_C.CONNACK),
        ),
        PacketType.PUBLISH: publishes_5(),
        PacketType.PUBACK: _acks_5(PubAck, PacketType.PUBACK),
        PacketType.PUBREC: _acks_5(PubRec, PacketType.PUBREC),
        PacketType.PUBREL: _acks_5(PubRel, PacketType.PUBREL),
        PacketType.PUBCOMP: _acks_5(PubComp, PacketType.PUBCOMP),
        PacketType.SUBSCRIBE: st.builds(
            Subscribe,
            packet_ids,
            st.lists(st.tuples(topic_filters(), subscription_options()), min_size=1, max_size=4),
            properties=properties_for(_C.SUBSCRIBE),
        ),
        PacketType.SUBACK: st.builds(
            SubAck,
            packet_ids,
            st.lists(_reasons(PacketType.SUBACK), min_size=1, max_size=6),
            properties_for(_C.SUBACK),
        ),
        PacketType.UNSUBSCRIBE: st.builds(
            Unsubscribe,
            packet_ids,
            st.lists(topic_filters(), min_size=1, max_size=4),
            properties=properties_for(_C.UNSUBSCRIBE),
        ),
        PacketType.UNSUBACK: st.builds(
            UnsubAck,
            packet_ids,
            st.lists(_reasons(PacketType.UNSUBACK), min_size=1, max_size=6),
            properties_for(_C.UNSUBACK),
        ),
        PacketType.PINGREQ: st.just(PingReq()),
        PacketType.PINGRESP: st.just(PingResp()),
        PacketType.DISCONNECT: st.builds(
            Disconnect, _reasons(PacketType.DISCONNECT), properties_for(_C.DISCONNECT)
        ),
        PacketType.AUTH: st.builds(Auth, _reasons(PacketType.AUTH), properties_for(_C.AUTH)),
    }
