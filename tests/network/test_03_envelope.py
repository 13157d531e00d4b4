"""The link envelope (docs/network.md §6): the leading `telemq-*` user properties of a copy
that crosses a link, split off again without touching the message's own properties."""

from __future__ import annotations

import random

import pytest

from telemq.network import envelope
from telemq.network.envelope import (
    LinkInfo,
    closed_envelope,
    extend,
    loops,
    parse_sync_tag,
    split,
    split_user_properties,
    sync_tag,
    wrap,
)
from telemq.protocol import Properties, Publish, decode_packet, encode_remaining_length
from telemq.protocol.codec5 import encode_publish5
from telemq.protocol.properties import (
    correlation_data_property,
    message_expiry_property,
    message_properties,
    read_message_properties,
)

MQTT_5 = 5


def user_property(name: bytes, value: bytes) -> bytes:
    """A User Property written out from the spec (§2.2.2.2, §1.5.7): identifier 0x26, then
    a UTF-8 string pair, each string a two-byte big-endian length and the bytes."""
    return b"\x26" + len(name).to_bytes(2, "big") + name + len(value).to_bytes(2, "big") + value


CONTENT_TYPE_JSON = b"\x03\x00\x10application/json"  # Content Type (0x03), 16 bytes

OWN_CASES = {
    "none": b"",
    "content type": CONTENT_TYPE_JSON,
    "everything": message_properties(
        Properties(
            payload_format_indicator=1,
            content_type="text/plain",
            response_topic="replies/1",
            correlation_data=b"\x00\x01\xff",
            user_properties=[("k", "v"), ("telemq-path", "X,Y"), ("k", "w"), ("telemq-sp", "s")],
        )
    ),
    "expiry first": message_expiry_property(60) + correlation_data_property(b"id"),
    "client telemq-path first": user_property(b"telemq-path", b"Z"),
    "client telemq-sp first": user_property(b"telemq-sp", b"theirs"),
    "client telemq-sync first": user_property(b"telemq-sync", b"not a sync tag at all"),
    "client telemq-to first, bad": user_property(b"telemq-to", b"nonsense"),
    "client telemq-owner first": user_property(b"telemq-owner", b"mallory"),
    "other user property": user_property(b"telemq-pathx", b"A"),
}

INFO_CASES = {
    "origin only": LinkInfo(("A",)),
    "two hops, sub point": LinkInfo(("A", "B"), "scores"),
    "remote queue": LinkInfo(("A", "B", "C.1"), to="D/Q/with/slashes", owner="bob"),
    "remote queue, anonymous": LinkInfo(("A",), to="D/Q"),
    "retained sync": LinkInfo(("hub",), sub_point="s", sync=sync_tag("s", "a b/#")),
    "everything": LinkInfo(("a-1", "b_2"), "sp é", "c/q", "üser", sync_tag("", "x/+/y")),
}


# ---------------------------------------------------------------------------
# Golden bytes, written by hand from the MQTT 5.0 specification


def test_wrap_golden_bytes() -> None:
    info = LinkInfo(("A", "B"), "scores")
    expected = (
        # User Property (0x26); name: 2-byte length 11, "telemq-path"; value: length 3, "A,B"
        b"\x26"
        + b"\x00\x0b"
        + b"telemq-path"
        + b"\x00\x03"
        + b"A,B"
        # User Property (0x26); name: length 9, "telemq-sp"; value: length 6, "scores"
        + b"\x26"
        + b"\x00\x09"
        + b"telemq-sp"
        + b"\x00\x06"
        + b"scores"
        # then the message's own properties, unchanged
        + CONTENT_TYPE_JSON
    )
    assert wrap(info, CONTENT_TYPE_JSON) == expected


def test_wrap_golden_bytes_remote_queue_and_sync() -> None:
    queue = LinkInfo(("A",), to="C/Q", owner="bob")
    assert wrap(queue, b"") == (
        b"\x26\x00\x0btelemq-path\x00\x01A"
        b"\x26\x00\x09telemq-to\x00\x03C/Q"
        b"\x26\x00\x0ctelemq-owner\x00\x03bob"
    )
    retained = LinkInfo(("A",), sync="scores a/#")
    assert wrap(retained, b"") == (
        b"\x26\x00\x0btelemq-path\x00\x01A\x26\x00\x0btelemq-sync\x00\x0ascores a/#"
    )


def test_wrap_omits_empty_sub_point() -> None:
    assert wrap(LinkInfo(("A",)), b"") == user_property(b"telemq-path", b"A")


def test_non_ascii_values_are_utf8_with_byte_lengths() -> None:
    wrapped = wrap(LinkInfo(("A",), "é"), b"")
    assert wrapped.endswith(b"\x00\x02\xc3\xa9")  # 2 bytes, not 1 character


# ---------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("own", OWN_CASES.values(), ids=OWN_CASES.keys())
@pytest.mark.parametrize("info", INFO_CASES.values(), ids=INFO_CASES.keys())
def test_round_trip(info: LinkInfo, own: bytes) -> None:
    assert split(wrap(info, own)) == (info, own)


@pytest.mark.parametrize("own", OWN_CASES.values(), ids=OWN_CASES.keys())
@pytest.mark.parametrize("info", INFO_CASES.values(), ids=INFO_CASES.keys())
def test_wrapped_bytes_are_a_valid_property_block(info: LinkInfo, own: bytes) -> None:
    """The protocol package's own reader takes them: envelope first, then the message's
    properties as they were."""
    wrapped = wrap(info, own)
    props = read_message_properties(wrapped)
    theirs = read_message_properties(own)
    envelope = props.user_properties[: len(props.user_properties) - len(theirs.user_properties)]
    assert envelope[0] == ("telemq-path", ",".join(info.path))
    assert all(name.startswith("telemq-") for name, _ in envelope)
    assert props.user_properties[len(envelope) :] == theirs.user_properties
    props.user_properties = theirs.user_properties
    assert props == theirs


def test_wrapped_bytes_make_a_valid_publish() -> None:
    own = OWN_CASES["everything"]
    wrapped = wrap(LinkInfo(("A", "B"), "scores"), own)
    block = encode_remaining_length(len(wrapped)) + wrapped  # the Property Length
    frame = encode_publish5(b"a/b", b"payload", 1, False, False, 7, block)
    packet = decode_packet(frame, MQTT_5, mqtt5=True)
    assert isinstance(packet, Publish)
    assert packet.properties is not None
    assert packet.properties.user_properties[:2] == [
        ("telemq-path", "A,B"),
        ("telemq-sp", "scores"),
    ]
    assert packet.properties.content_type == "text/plain"
    assert packet.properties.correlation_data == b"\x00\x01\xff"


def test_client_telemq_path_is_the_messages() -> None:
    """A client's `telemq-path`, after its other properties or first among them, is never
    taken for the envelope, nor stripped from the message."""
    own = OWN_CASES["everything"]
    info, rest = split(wrap(LinkInfo(("A",)), own))
    assert info == LinkInfo(("A",))
    assert rest == own
    assert ("telemq-path", "X,Y") in read_message_properties(rest).user_properties
    info, rest = split(wrap(LinkInfo(("A",)), OWN_CASES["client telemq-path first"]))
    assert info == LinkInfo(("A",))
    assert read_message_properties(rest).user_properties == [("telemq-path", "Z")]


def test_client_telemq_property_right_after_the_envelope_gets_an_end_guard() -> None:
    """An envelope without `telemq-sp`, then a client's `telemq-sp`: `wrap` closes the
    envelope with an empty `telemq-sync`, so the client's stays the message's."""
    own = OWN_CASES["client telemq-sp first"]
    wrapped = wrap(LinkInfo(("A",)), own)
    assert wrapped == (
        user_property(b"telemq-path", b"A") + user_property(b"telemq-sync", b"") + own
    )
    assert split(wrapped) == (LinkInfo(("A",)), own)
    # Without the guard (the envelope sent apart from what follows) it would be taken.
    bare = wrap(LinkInfo(("A",)), b"") + own
    assert split(bare) == (LinkInfo(("A",), "theirs"), b"")


def test_no_guard_when_not_needed() -> None:
    assert wrap(LinkInfo(("A",)), CONTENT_TYPE_JSON) == (
        user_property(b"telemq-path", b"A") + CONTENT_TYPE_JSON
    )
    synced = LinkInfo(("A",), sync="s f")
    assert wrap(synced, OWN_CASES["client telemq-sp first"]).count(b"telemq-sync") == 1


def test_out_of_order_or_repeated_names_end_the_envelope() -> None:
    path = user_property(b"telemq-path", b"A")
    to = user_property(b"telemq-to", b"C/Q")
    sp = user_property(b"telemq-sp", b"s")
    assert split(path + to + sp) == (LinkInfo(("A",), to="C/Q"), sp)
    assert split(path + path) == (LinkInfo(("A",)), path)
    assert split(path + sp + sp) == (LinkInfo(("A",), "s"), sp)


def test_explicit_empty_values_mean_absent() -> None:
    data = (
        user_property(b"telemq-path", b"A")
        + user_property(b"telemq-sp", b"")
        + user_property(b"telemq-to", b"")
        + user_property(b"telemq-owner", b"")
        + user_property(b"telemq-sync", b"")
        + CONTENT_TYPE_JSON
    )
    assert split(data) == (LinkInfo(("A",)), CONTENT_TYPE_JSON)


@pytest.mark.parametrize(
    "properties",
    [
        b"",
        CONTENT_TYPE_JSON,
        user_property(b"telemq-sp", b"s") + user_property(b"telemq-path", b"A"),
        CONTENT_TYPE_JSON + user_property(b"telemq-path", b"A"),
        user_property(b"telemq-pathx", b"A"),
        b"\x26\x00",  # malformed, but not an envelope: the message's to judge
    ],
)
def test_no_leading_path_is_no_envelope(properties: bytes) -> None:
    assert split(properties) == (None, properties)


def test_randomised_round_trip() -> None:
    rng = random.Random(20240603)
    alphabet = "ab/+# é€😀-_.,"
    names = "ABCxyz019._-"
    owns = list(OWN_CASES.values())
    for _ in range(500):
        path = tuple(
            "".join(rng.choice(names) for _ in range(rng.randint(1, 48)))
            for _ in range(rng.randint(1, 6))
        )

        def text(low: int = 0) -> str:
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, 12)))

        to = rng.choice(["", f"{path[0]}/{text(1)}"])
        info = LinkInfo(
            path,
            rng.choice(["", text()]),
            to,
            rng.choice(["", text()]) if to else "",
            rng.choice(["", f"{text()} {text(1)}"]),
        )
        own = rng.choice(owns)
        assert split(wrap(info, own)) == (info, own)


def test_split_memo_returns_the_same_value_and_stays_bounded() -> None:
    wrapped = wrap(LinkInfo(("A", "B"), "memo"), CONTENT_TYPE_JSON)
    first, _ = split(wrapped)
    second, rest = split(bytes(wrapped))  # equal bytes, another object
    assert first is second
    assert rest == CONTENT_TYPE_JSON
    for index in range(3000):
        assert split(wrap(LinkInfo((f"b{index}",)), b""))[0] == LinkInfo((f"b{index}",))
    assert len(envelope._DECODED) <= envelope._DECODED_MAX
    assert split(wrapped) == (LinkInfo(("A", "B"), "memo"), CONTENT_TYPE_JSON)


def test_invalid_envelope_is_refused_every_time() -> None:
    bad = user_property(b"telemq-path", b"A,,B")
    for _ in range(3):
        with pytest.raises(ValueError, match="empty broker name"):
            split(bad)
    assert bad not in envelope._DECODED


# ---------------------------------------------------------------------------
# A closed envelope ahead of the message's properties; reading a decoded block


def test_closed_envelope_golden_bytes() -> None:
    assert closed_envelope(LinkInfo(("A",), "s")) == (
        b"\x26\x00\x0btelemq-path\x00\x01A"
        b"\x26\x00\x09telemq-sp\x00\x01s"
        b"\x26\x00\x0btelemq-sync\x00\x00"  # the end: an empty telemq-sync
    )
    synced = LinkInfo(("A",), sync="s f")
    assert closed_envelope(synced) == wrap(synced, b"")  # already ends with telemq-sync
    with pytest.raises(ValueError, match="empty broker name"):
        closed_envelope(LinkInfo(("A", "")))


@pytest.mark.parametrize("own", OWN_CASES.values(), ids=OWN_CASES.keys())
@pytest.mark.parametrize("info", INFO_CASES.values(), ids=INFO_CASES.keys())
def test_closed_envelope_before_any_properties(info: LinkInfo, own: bytes) -> None:
    """What a sender writes as a delivery's own properties ahead of the message's (with a
    Message Expiry Interval in between or not) reads back with `split`, and, once the block
    is decoded, with `split_user_properties`."""
    theirs = read_message_properties(own)
    expiry = message_expiry_property(30)
    afters = [own] if theirs.message_expiry_interval is not None else [own, expiry + own]
    for after in afters:
        data = closed_envelope(info) + after
        assert split(data) == (info, after)
        decoded = read_message_properties(data)
        assert split_user_properties(decoded.user_properties) == (info, theirs.user_properties)


def test_split_user_properties_rules() -> None:
    path = ("telemq-path", "A,B")
    assert split_user_properties([]) == (None, [])
    assert split_user_properties([("k", "v"), path]) == (None, [("k", "v"), path])
    assert split_user_properties([path]) == (LinkInfo(("A", "B")), [])
    assert split_user_properties([path, ("telemq-sp", "s"), ("k", "v")]) == (
        LinkInfo(("A", "B"), "s"),
        [("k", "v")],
    )
    assert split_user_properties([path, path]) == (LinkInfo(("A", "B")), [path])
    to, sp = ("telemq-to", "C/Q"), ("telemq-sp", "s")
    assert split_user_properties([path, to, sp]) == (LinkInfo(("A", "B"), to="C/Q"), [sp])
    guard = ("telemq-sync", "")
    assert split_user_properties([path, guard, sp]) == (LinkInfo(("A", "B")), [sp])


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("telemq-path", "")], "telemq-path is empty"),
        ([("telemq-path", "A,,B")], "empty broker name"),
        ([("telemq-path", "A"), ("telemq-to", "Q")], "telemq-to 'Q' is not"),
        ([("telemq-path", "A"), ("telemq-owner", "bob")], "telemq-owner 'bob' without"),
        ([("telemq-path", "A"), ("telemq-sync", "x")], "telemq-sync 'x' is not"),
    ],
)
def test_split_user_properties_errors(pairs: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(ValueError, match=f"^link envelope: .*{message}"):
        split_user_properties(pairs)


# ---------------------------------------------------------------------------
# Path


def test_extend_and_loops() -> None:
    info = LinkInfo(("A",), "sp", "C/Q", "bob", "")
    longer = extend(info, "B")
    assert longer == LinkInfo(("A", "B"), "sp", "C/Q", "bob", "")
    assert info.path == ("A",)  # frozen: a new value
    assert longer.origin == "A"
    assert loops(longer, "A")
    assert loops(longer, "B")
    assert not loops(longer, "C")
    assert not loops(longer, "a")  # names are compared exactly
    assert split(wrap(extend(longer, "C"), b""))[0] == LinkInfo(("A", "B", "C"), "sp", "C/Q", "bob")


def test_origin_of_empty_path() -> None:
    assert LinkInfo(()).origin == ""


def test_sync_tag() -> None:
    assert sync_tag("", "a/#") == " a/#"
    assert parse_sync_tag(sync_tag("", "a/#")) == ("", "a/#")
    assert parse_sync_tag(sync_tag("scores", "a b/c")) == ("scores", "a b/c")
    with pytest.raises(ValueError, match="not '<sub point> <filter>'"):
        parse_sync_tag("scores")
    with pytest.raises(ValueError, match="not '<sub point> <filter>'"):
        parse_sync_tag("scores ")


# ---------------------------------------------------------------------------
# Errors


def path_then(value: bytes, *more: bytes) -> bytes:
    return user_property(b"telemq-path", value) + b"".join(more)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x26\x00\x0btelemq-path", "telemq-path ends early"),
        (b"\x26\x00\x0btelemq-path\x00", "telemq-path ends early"),
        (b"\x26\x00\x0btelemq-path\x00\x05AB", "telemq-path runs past the end"),
        (path_then(b"A", b"\x26\x00\x09telemq-sp\x00\x09s"), "telemq-sp runs past the end"),
        (path_then(b"A\xff"), "telemq-path is not valid UTF-8"),
        (path_then(b"A", user_property(b"telemq-sp", b"\xc3")), "telemq-sp is not valid UTF-8"),
        (path_then(b"A\x00"), "telemq-path 'A\\\\x00' contains U\\+0000"),
        (path_then(b"A", user_property(b"telemq-sp", b"a\x1fb")), "contains U\\+001F"),
        (path_then(b""), "telemq-path is empty"),
        (path_then(b"A,,B"), "telemq-path 'A,,B': empty broker name"),
        (path_then(b"A,"), "empty broker name"),
        (path_then(b",A"), "empty broker name"),
        (path_then(b"A,b c"), "'b c' is not a broker name"),
        (path_then(b"x" * 49), "is not a broker name"),
        (path_then(b"A", user_property(b"telemq-to", b"CQ")), "telemq-to 'CQ' is not"),
        (path_then(b"A", user_property(b"telemq-to", b"C/")), "telemq-to 'C/' is not"),
        (path_then(b"A", user_property(b"telemq-to", b"/Q")), "telemq-to '/Q' is not"),
        (path_then(b"A", user_property(b"telemq-owner", b"bob")), "telemq-owner 'bob' without"),
        (path_then(b"A", user_property(b"telemq-sync", b"scores")), "telemq-sync 'scores'"),
        (path_then(b"A", user_property(b"telemq-sync", b"s ")), "telemq-sync 's '"),
    ],
)
def test_split_malformed(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=f"^link envelope: .*{message}"):
        split(data)


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (LinkInfo(()), "telemq-path is empty"),
        (LinkInfo(("A", "")), "empty broker name"),
        (LinkInfo(("A,B",)), "'A,B' is not a broker name"),
        (LinkInfo(("A b",)), "'A b' is not a broker name"),
        (LinkInfo(("A",), "s\x00"), "telemq-sp 's\\\\x00' contains U\\+0000"),
        (LinkInfo(("A",), "\udc80"), "lone surrogate"),
        (LinkInfo(("A",), "é" * 40_000), "telemq-sp is 80000 bytes, over 65,535"),
        (LinkInfo(("A",), to="Q"), "telemq-to 'Q' is not '<broker>/<queue>'"),
        (LinkInfo(("A",), owner="bob"), "telemq-owner 'bob' without telemq-to"),
        (LinkInfo(("A",), sync="a/#"), "telemq-sync 'a/#' is not"),
    ],
)
def test_wrap_refuses_what_split_would(info: LinkInfo, message: str) -> None:
    with pytest.raises(ValueError, match=f"^link envelope: .*{message}"):
        wrap(info, b"")
