"""Hypothesis strategies for valid MQTT 3.1 / 3.1.1 packets, topic names and topic filters.

Strategies are built from the rules themselves (MQTT 3.1.1 §1.5.3, §2.3.1, §4.7), not from
telemq's validators, so that the validators can be tested against them.
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st

from telemq.protocol import (
    SUBACK_FAILURE,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
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

PROTOCOL_NAMES = {3: "MQIsdp", 4: "MQTT"}

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
