"""The link envelope: what a publication carries across a link besides the message itself.

Theory of operation
-------------------
A copy that crosses a link must say where it has been (the path, for loop detection and the
journal's origin), which subscription point it belongs to, and, for the two special kinds of
copies, where it is going (a queue on another broker) or what it answers (a retained sync
copy), and who published it (the client id and user id that filters and journals read at
every broker, as IBM MQ keeps a forwarded publication's user identifier). MQTT 5.0 already
has a place for such facts that every hop forwards unchanged: user properties
(§3.3.2.3.7). So the envelope is a run of user properties named `telemq-*` at the
*start* of the copy's property block, and the message's own properties follow, byte for
byte. Nothing is re-encoded: the receiver cuts the envelope off the front and keeps the rest
as the message's properties (the bytes a broker stores with a message, without the Property
Length), so a forwarded message keeps its content type, correlation data and user
properties, in order, whatever they are - including a client's own `telemq-path`.

Only the *leading* run is the envelope. It always opens with `telemq-path`, and the optional
properties follow in one fixed order, each at most once; a `telemq-*` property out of that
order (a second `telemq-path`, a `telemq-sp` after `telemq-to`...) ends the run and belongs
to the message. One ambiguity is left: an envelope that omits an optional property, followed
by message properties that start with a client's user property of that very name. `wrap`
sees the message's properties and closes such an envelope with a guard: an empty
`telemq-sync`, which ends the envelope (nothing after it is read as the envelope's), or,
after a `telemq-sync` tag or a `telemq-user`, an empty `telemq-client` (the last name). A
sender that puts the envelope ahead of properties it does not show `wrap` (a delivery's own
properties, sent before the message's) uses `sealed_envelope`, which always ends closed. A
receiver that has already decoded the block reads the envelope off the front of its user
properties with `split_user_properties`: decoding keeps user properties in wire order, so
the envelope is still the leading run there.

The publisher's identity (`telemq-user`, `telemq-client`) came after the first version of
the envelope, and the link protocol kept its version (`telemq-link: 1`): the two names come
after all the others, where a broker of the first version has already stopped reading (the
empty `telemq-sync` it writes, or any name it does not know, ends its envelope). Such a
broker keeps working: it sees the identity as two user properties of the message, and the
envelope it writes onward ends with an empty `telemq-sync`, so a newer broker after it never
takes a client's own `telemq-client` for the publisher's.

Byte layout of `wrap(info, own)` (each string: two-byte big-endian length, then UTF-8):

    0x26  00 0B "telemq-path"   len "A,B"              always; origin first, then each sender
    0x26  00 09 "telemq-sp"     len sub point          when the sub point is not ""
    0x26  00 09 "telemq-to"     len "C/Q"              remote-queue copies: broker C, queue Q
    0x26  00 0C "telemq-owner"  len user               remote-queue copies, when the user is not ""
    0x26  00 0B "telemq-sync"   len "<sp> <filter>"    retained sync copies (len 0: the end)
    0x26  00 0B "telemq-user"   len user id            when the publisher's user id is not ""
    0x26  00 0D "telemq-client" len client id          the publisher's client id (len 0: the
                                                       end, when only a user id is known)
    own                                                the message's properties, unchanged

Both directions run once per forwarded message, so they work on bytes: `wrap` is a handful
of concatenations around constant headers, and neither decodes the message's own
properties. `split` frames the envelope with a few `startswith` tests against the same
constants and length arithmetic, then looks the envelope's bytes up in a small memo of
envelopes already decoded: the copies arriving over a link share a few envelopes (one per
origin and sub point), and decoding, validating and building a frozen `LinkInfo` costs
several times the lookup. The memo holds values only (bytes -> the `LinkInfo` they mean),
never an invalid envelope, and is emptied when full, so it is no state of any broker. A
copy without identity costs what it did before identity existed: no byte more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ..protocol.topics import forbidden_character

PATH: Final = "telemq-path"
SUB_POINT: Final = "telemq-sp"
TO: Final = "telemq-to"
OWNER: Final = "telemq-owner"
SYNC: Final = "telemq-sync"
USER: Final = "telemq-user"
CLIENT: Final = "telemq-client"

# The envelope's properties in their one order (a property's rank is its index).
_NAMES: Final[tuple[str, ...]] = (PATH, SUB_POINT, TO, OWNER, SYNC, USER, CLIENT)
_SYNC: Final = 4  # rank of telemq-sync: empty, it ends the envelope
_USER: Final = 5
_LAST: Final = 6  # rank of telemq-client: nothing of the envelope may follow it
# User Property identifier and the length-prefixed name: what every envelope property
# starts with.
_HEADS: Final[tuple[bytes, ...]] = tuple(
    b"\x26" + len(name).to_bytes(2, "big") + name.encode("ascii") for name in _NAMES
)
_PATH_HEAD: Final = _HEADS[0]
_END_GUARD: Final = _HEADS[_SYNC] + b"\x00\x00"  # telemq-sync: "", the end
_CLIENT_GUARD: Final = _HEADS[_LAST] + b"\x00\x00"  # telemq-client: "", the last name
_TELEMQ: Final = b"telemq-"

# A broker name as docs/network.md §2 allows it with links configured.
_NAME_RULE: Final = "[A-Za-z0-9._-]{1,48}"
NAME_RE: Final = re.compile(_NAME_RULE)
_PATH_RE: Final = re.compile(f"{_NAME_RULE}(?:,{_NAME_RULE})*")
_TO_RE: Final = re.compile(f"{_NAME_RULE}/.+")
_MAX_STRING: Final = 0xFFFF


@dataclass(frozen=True, slots=True)
class LinkInfo:
    """The envelope of one copy. `path`: the brokers it went through, origin first (never
    empty in a valid envelope); `sub_point`: its subscription point; `to` (`"C/Q"`) and
    `owner`: a copy for queue Q on broker C, owned by that user; `sync`: `"<sp> <filter>"`
    of the proxy a retained sync copy answers (see `sync_tag`); `client_id` and `user_id`:
    who published it, at its origin. "" means absent."""

    path: tuple[str, ...]
    sub_point: str = ""
    to: str = ""
    owner: str = ""
    sync: str = ""
    client_id: str = ""
    user_id: str = ""

    @property
    def origin(self) -> str:
        """The broker the publication was made at ("" for an empty path)."""
        return self.path[0] if self.path else ""


def broker_name_error(name: str) -> str | None:
    """Why `name` is not a broker name (1-48 letters, digits, '.', '_', '-'), or None."""
    if NAME_RE.fullmatch(name) is not None:
        return None
    if not name:
        return "empty broker name"
    return f"{name!r} is not a broker name (1-48 letters, digits, '.', '_', '-')"


def sync_tag(sub_point: str, topic_filter: str) -> str:
    """The `telemq-sync` value for the proxy `(sub_point, topic_filter)`."""
    return f"{sub_point} {topic_filter}"


def parse_sync_tag(tag: str) -> tuple[str, str]:
    """`(sub point, filter)` of a `telemq-sync` value, split at its first space (a sub point
    with a space in it cannot be told apart). `ValueError` for a value without a filter."""
    sep = tag.find(" ")
    if sep < 0 or sep == len(tag) - 1:
        raise ValueError(f"{SYNC} {tag!r} is not '<sub point> <filter>'")
    return tag[:sep], tag[sep + 1 :]


def extend(info: LinkInfo, own_name: str) -> LinkInfo:
    """`info` with this broker appended to its path: what it sends on to the next hop."""
    return LinkInfo(
        (*info.path, own_name),
        info.sub_point,
        info.to,
        info.owner,
        info.sync,
        info.client_id,
        info.user_id,
    )


def loops(info: LinkInfo, own_name: str) -> bool:
    """True when the copy has been here before: this broker's name is in its path."""
    return own_name in info.path


# ---------------------------------------------------------------------------
# Encoding


def _path_error(path: tuple[str, ...]) -> str:
    """Why `path` cannot be a telemq-path (called only once it failed the fast check)."""
    if not path:
        return f"{PATH} is empty"
    for name in path:
        problem = broker_name_error(name)
        if problem is not None:
            return f"{PATH} {','.join(path)!r}: {problem}"
    return f"{PATH} {','.join(path)!r} is too long"


def _field(rank: int, value: str) -> bytes:
    """The envelope property of `rank` with `value` (`ValueError` for what cannot be sent)."""
    if not value.isprintable():
        forbidden = forbidden_character(value)
        if forbidden is not None:
            raise ValueError(f"link envelope: {_NAMES[rank]} {value!r} contains {forbidden}")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"link envelope: {_NAMES[rank]} {value!r} is not valid Unicode (a lone surrogate)"
        ) from None
    if len(data) > _MAX_STRING:
        raise ValueError(f"link envelope: {_NAMES[rank]} is {len(data)} bytes, over 65,535")
    return _HEADS[rank] + len(data).to_bytes(2, "big") + data


def _values_error(to: str, owner: str, sync: str) -> str | None:
    """Why the optional values do not go together or are malformed, or None."""
    if to and _TO_RE.fullmatch(to) is None:
        return f"{TO} {to!r} is not '<broker>/<queue>'"
    if owner and not to:
        return f"{OWNER} {owner!r} without {TO}"
    if sync:
        sep = sync.find(" ")
        if sep < 0 or sep == len(sync) - 1:
            return f"{SYNC} {sync!r} is not '<sub point> <filter>'"
    return None


def wrap(info: LinkInfo, own_properties: bytes) -> bytes:
    """The properties of the copy of a message whose own properties are `own_properties`
    (as stored, without a Property Length): `info`'s envelope, then `own_properties`
    unchanged. `ValueError` for an envelope that could not be read back as `info`."""
    path = ",".join(info.path)
    if (
        _PATH_RE.fullmatch(path) is None
        or path.count(",") != len(info.path) - 1  # a name with a comma in it
        or len(path) > _MAX_STRING
    ):
        raise ValueError(f"link envelope: {_path_error(info.path)}")
    out = _PATH_HEAD + len(path).to_bytes(2, "big") + path.encode("ascii")
    rank = 0
    if info.sub_point:
        out += _field(1, info.sub_point)
        rank = 1
    if info.to or info.owner or info.sync:
        problem = _values_error(info.to, info.owner, info.sync)
        if problem is not None:
            raise ValueError(f"link envelope: {problem}")
        if info.to:
            out += _field(2, info.to)
            rank = 2
        if info.owner:
            out += _field(3, info.owner)
            rank = 3
        if info.sync:
            out += _field(4, info.sync)
            rank = _SYNC
    if info.user_id:
        out += _field(_USER, info.user_id)
        rank = _USER
    if info.client_id:
        out += _field(_LAST, info.client_id)
        rank = _LAST
    if (
        rank < _LAST
        and own_properties.startswith(_TELEMQ, 3)
        and own_properties[0] == 0x26  # the message opens with a client's telemq-* property
    ):
        if rank < _SYNC:
            out += _END_GUARD
        elif own_properties.startswith(_HEADS[_LAST]) or (
            rank < _USER and own_properties.startswith(_HEADS[_USER])
        ):
            out += _CLIENT_GUARD
    return out + own_properties


def closed_envelope(info: LinkInfo) -> bytes:
    """`info`'s envelope alone, for a sender that puts it ahead of properties it does not
    pass to `wrap`: closed by an empty `telemq-sync` without identity or sync tag, and by a
    `telemq-client` (empty when `info.client_id` is) with a user id, so that nothing after
    it can be read as the envelope's. An envelope with a sync tag and no identity ends with
    its tag, as in the envelope's first version: `sealed_envelope` closes that one too.
    `ValueError` as for `wrap`."""
    envelope = wrap(info, b"")
    if info.client_id:
        return envelope
    if info.user_id:
        return envelope + _CLIENT_GUARD
    return envelope if info.sync else envelope + _END_GUARD


def sealed_envelope(info: LinkInfo) -> bytes:
    """`closed_envelope`, closed against every name whatever `info` holds: what a sender
    puts ahead of a message's properties. `ValueError` as for `wrap`."""
    envelope = closed_envelope(info)
    if info.sync and not info.client_id and not info.user_id:
        return envelope + _CLIENT_GUARD
    return envelope


def identified(envelope: bytes, client_id: str, user_id: str) -> bytes:
    """A sealed envelope without identity and with no sync tag (`sealed_envelope` of such a
    `LinkInfo`) given the publisher's `client_id` and `user_id`: its closing empty
    `telemq-sync` replaced by them, as `sealed_envelope` would write them. `envelope` itself
    when both are ""; a value that cannot be sent (a control character) is left out, so that
    a publication always crosses."""
    user = _field_or_empty(_USER, user_id) if user_id else b""
    client = _field_or_empty(_LAST, client_id) if client_id else b""
    if not user and not client:
        return envelope
    if envelope.endswith(_END_GUARD):
        envelope = envelope[: -len(_END_GUARD)]
    return envelope + user + (client or _CLIENT_GUARD)


def _field_or_empty(rank: int, value: str) -> bytes:
    """`_field`, or b"" for a value it refuses."""
    try:
        return _field(rank, value)
    except ValueError:
        return b""


# ---------------------------------------------------------------------------
# Decoding


def _skip(data: bytes, pos: int, rank: int) -> int:
    """The position after the value of the envelope property of `rank` whose two-byte
    length is at `pos`."""
    if pos + 2 > len(data):
        raise ValueError(f"link envelope: {_NAMES[rank]} ends early")
    end = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if end > len(data):
        raise ValueError(
            f"link envelope: {_NAMES[rank]} runs past the end of the properties "
            f"({end - pos - 2} bytes announced, {len(data) - pos - 2} left)"
        )
    return end


def _next(data: bytes, pos: int, rank: int) -> int:
    """The rank of the envelope property at `pos` if it may follow one of `rank`, else 0:
    the envelope ends there."""
    if pos >= len(data) or data[pos] != 0x26:
        return 0
    for candidate in range(rank + 1, _LAST + 1):
        if data.startswith(_HEADS[candidate], pos):
            return candidate
    return 0


def _value(data: bytes, pos: int, rank: int) -> str:
    """The value of the envelope property of `rank` whose length is at `pos` (framing
    already checked by `_skip`)."""
    start = pos + 2
    try:
        value = data[start : start + ((data[pos] << 8) | data[pos + 1])].decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"link envelope: {_NAMES[rank]} is not valid UTF-8") from None
    if not value.isprintable():
        forbidden = forbidden_character(value)
        if forbidden is not None:
            raise ValueError(f"link envelope: {_NAMES[rank]} {value!r} contains {forbidden}")
    return value


def _decode(envelope: bytes) -> LinkInfo:
    """The `LinkInfo` of `envelope`, a whole run as `split` delimited it."""
    pos = len(_PATH_HEAD)
    path = _value(envelope, pos, 0)
    values = ["", "", "", "", "", ""]  # sub point, to, owner, sync, user, client
    pos = _skip(envelope, pos, 0)
    rank = _next(envelope, pos, 0)
    while rank:
        pos += len(_HEADS[rank])
        values[rank - 1] = _value(envelope, pos, rank)
        pos = _skip(envelope, pos, rank)
        rank = _next(envelope, pos, _LAST if rank == _SYNC and not values[3] else rank)
    return _checked(path, values)


def _checked(path: str, values: list[str]) -> LinkInfo:
    """The `LinkInfo` of decoded envelope values (sub point, to, owner, sync, user,
    client), checked."""
    if _PATH_RE.fullmatch(path) is None:
        raise ValueError(f"link envelope: {_path_error(tuple(path.split(',')) if path else ())}")
    problem = _values_error(values[1], values[2], values[3])
    if problem is not None:
        raise ValueError(f"link envelope: {problem}")
    return LinkInfo(
        tuple(path.split(",")), values[0], values[1], values[2], values[3], values[5], values[4]
    )


# Envelopes already decoded (see the module docstring): valid ones only, emptied when full.
_DECODED: Final[dict[bytes, LinkInfo]] = {}
_DECODED_MAX: Final = 1024


def split(properties: bytes) -> tuple[LinkInfo | None, bytes]:
    """The envelope at the start of a copy's `properties` (as received, without a Property
    Length) and the message's own properties after it; `(None, properties)` when they do not
    open with `telemq-path`. `ValueError` for an envelope that is cut short, not UTF-8, or
    holds a bad value (a path that is not comma-separated broker names, a `telemq-to` that
    is not `C/Q`...)."""
    if not properties.startswith(_PATH_HEAD):
        return None, properties
    pos = _skip(properties, len(_PATH_HEAD), 0)
    rank = _next(properties, pos, 0)
    while rank:
        start = pos + len(_HEADS[rank])
        pos = _skip(properties, start, rank)
        if rank == _SYNC and pos == start + 2:
            break  # an empty telemq-sync: the end
        rank = _next(properties, pos, rank)
    envelope = properties[:pos]
    info = _DECODED.get(envelope)
    if info is None:
        info = _decode(envelope)
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()
        _DECODED[envelope] = info
    return info, properties[pos:]


_RANKS: Final[dict[str, int]] = {name: rank for rank, name in enumerate(_NAMES) if rank}


def split_user_properties(
    pairs: list[tuple[str, str]],
) -> tuple[LinkInfo | None, list[tuple[str, str]]]:
    """`split` for a block already decoded: the envelope at the start of its user properties
    (`Properties.user_properties`, in wire order) and the message's own user properties
    after it; `(None, pairs)` when they do not open with `telemq-path`. The same rules:
    names in their one order, each once, an empty `telemq-sync` the end, and `ValueError`
    for a bad value. The strings are taken as the protocol's decoder gives them: valid
    UTF-8, no control characters."""
    if not pairs or pairs[0][0] != PATH:
        return None, pairs
    values = ["", "", "", "", "", ""]  # sub point, to, owner, sync, user, client
    rank = 0
    index = 1
    while rank < _LAST and index < len(pairs):
        name, value = pairs[index]
        found = _RANKS.get(name, 0)
        if found <= rank:
            break  # a user property of the message's
        values[found - 1] = value
        rank = _LAST if found == _SYNC and not value else found
        index += 1
    return _checked(pairs[0][1], values), pairs[index:]
