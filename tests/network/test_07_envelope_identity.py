"""The publisher's identity in the link envelope (`telemq-user`, `telemq-client`, after the
first version's names): round trips, the guards that keep a client's own `telemq-client`
the message's, and what a broker of the first version reads (docs/network.md §6)."""

from __future__ import annotations

import pytest

from telemq.network.envelope import (
    LinkInfo,
    closed_envelope,
    extend,
    identified,
    sealed_envelope,
    split,
    split_user_properties,
    sync_tag,
    wrap,
)
from telemq.protocol.properties import message_expiry_property, read_message_properties

FIRST_VERSION = ("telemq-path", "telemq-sp", "telemq-to", "telemq-owner", "telemq-sync")


def user_property(name: bytes, value: bytes) -> bytes:
    return b"\x26" + len(name).to_bytes(2, "big") + name + len(value).to_bytes(2, "big") + value


CONTENT_TYPE = b"\x03\x00\x10application/json"

OWN_CASES = {
    "none": b"",
    "content type": CONTENT_TYPE,
    "client telemq-client first": user_property(b"telemq-client", b"spoof"),
    "client telemq-user first": user_property(b"telemq-user", b"root"),
    "client telemq-sync first": user_property(b"telemq-sync", b""),
    "client telemq-sp first": user_property(b"telemq-sp", b"theirs"),
    "content type, then telemq-client": CONTENT_TYPE + user_property(b"telemq-client", b"x"),
}

INFO_CASES = {
    "no identity": LinkInfo(("A",)),
    "client": LinkInfo(("A",), client_id="pub-1"),
    "user": LinkInfo(("A",), user_id="alice"),
    "both": LinkInfo(("A", "B"), "sp", client_id="pub-1", user_id="alice"),
    "retained sync, both": LinkInfo(("A",), sync=sync_tag("", "a/#"), client_id="c", user_id="u"),
    "retained sync, none": LinkInfo(("A",), sync=sync_tag("", "a/#")),
    "remote queue": LinkInfo(("A",), to="C/Q", owner="bob", client_id="c", user_id="ü"),
}


def first_version_read(
    pairs: list[tuple[str, str]],
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """What a broker of the envelope's first version takes as the envelope (the names it
    knows, in their order, each once) and leaves to the message."""
    if not pairs or pairs[0][0] != FIRST_VERSION[0]:
        return [], pairs
    rank = 0
    index = 1
    while rank < 4 and index < len(pairs):
        name = pairs[index][0]
        if name not in FIRST_VERSION or FIRST_VERSION.index(name) <= rank:
            break
        rank = FIRST_VERSION.index(name)
        index += 1
    return pairs[:index], pairs[index:]


def test_golden_bytes_with_identity() -> None:
    info = LinkInfo(("A",), client_id="pub-1", user_id="alice")
    assert closed_envelope(info) == (
        b"\x26\x00\x0btelemq-path\x00\x01A"
        b"\x26\x00\x0btelemq-user\x00\x05alice"
        b"\x26\x00\x0dtelemq-client\x00\x05pub-1"
    )
    # A user id alone: closed by an empty telemq-client, the last name.
    assert closed_envelope(LinkInfo(("A",), user_id="alice")).endswith(
        b"\x26\x00\x0dtelemq-client\x00\x00"
    )


@pytest.mark.parametrize("own", OWN_CASES.values(), ids=OWN_CASES.keys())
@pytest.mark.parametrize("info", INFO_CASES.values(), ids=INFO_CASES.keys())
def test_identity_round_trips(info: LinkInfo, own: bytes) -> None:
    assert split(wrap(info, own)) == (info, own)
    theirs = read_message_properties(own).user_properties
    for after in (own, message_expiry_property(30) + own):
        data = sealed_envelope(info) + after
        assert split(data) == (info, after)
        decoded = read_message_properties(data)
        assert split_user_properties(decoded.user_properties) == (info, theirs)


def test_an_empty_telemq_sync_ends_the_envelope() -> None:
    """A first-version sender closes every envelope without a sync tag so: a client's
    `telemq-client` after it is never taken for the publisher's."""
    own = user_property(b"telemq-client", b"spoof") + user_property(b"telemq-user", b"root")
    first_version = closed_envelope(LinkInfo(("A",), "sp"))
    assert split(first_version + own) == (LinkInfo(("A",), "sp"), own)
    pairs = read_message_properties(first_version + own).user_properties
    assert split_user_properties(pairs) == (
        LinkInfo(("A",), "sp"),
        [("telemq-client", "spoof"), ("telemq-user", "root")],
    )


def test_out_of_order_identity_belongs_to_the_message() -> None:
    path = user_property(b"telemq-path", b"A")
    client = user_property(b"telemq-client", b"c")
    user = user_property(b"telemq-user", b"u")
    assert split(path + client + user) == (LinkInfo(("A",), client_id="c"), user)
    assert split(path + user + client + client) == (
        LinkInfo(("A",), client_id="c", user_id="u"),
        client,
    )


@pytest.mark.parametrize("info", INFO_CASES.values(), ids=INFO_CASES.keys())
def test_a_first_version_broker_reads_what_it_knows(info: LinkInfo) -> None:
    """An older broker takes the names it knows, with their values, and the identity as
    user properties of the message, ahead of the message's own."""
    block = sealed_envelope(info) + user_property(b"k", b"v")
    envelope, rest = first_version_read(read_message_properties(block).user_properties)
    read = dict(envelope)
    assert read["telemq-path"] == ",".join(info.path)
    assert [read.get(name, "") for name in FIRST_VERSION[1:]] == [
        info.sub_point,
        info.to,
        info.owner,
        info.sync,
    ]
    assert rest[-1] == ("k", "v")
    assert {name for name, _ in rest[:-1]} <= {"telemq-user", "telemq-client"}
    assert [value for _, value in rest[:-1] if value] == [
        value for value in (info.user_id, info.client_id) if value
    ]


def test_identified_is_the_sealed_envelope_with_identity() -> None:
    for sub_point in ("", "sp"):
        base = sealed_envelope(LinkInfo(("A",), sub_point))
        assert identified(base, "", "") is base
        for client_id, user_id in (("c", ""), ("", "u"), ("c", "u"), ("c é", "ü 1")):
            info = LinkInfo(("A",), sub_point, client_id=client_id, user_id=user_id)
            assert identified(base, client_id, user_id) == sealed_envelope(info)
    # A value that cannot be sent is left out: the copy still crosses.
    base = sealed_envelope(LinkInfo(("A",)))
    assert identified(base, "c", "bad\x00user") == sealed_envelope(LinkInfo(("A",), client_id="c"))
    assert identified(base, "bad\x01", "") is base


def test_extend_keeps_the_identity() -> None:
    info = LinkInfo(("A",), "sp", client_id="c", user_id="u")
    assert extend(info, "B") == LinkInfo(("A", "B"), "sp", client_id="c", user_id="u")
