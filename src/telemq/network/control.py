"""Control messages: what two linked brokers tell each other besides publications.

Theory of operation
-------------------
Proxy subscriptions, the end of a retained answer, reachability and network-wide retained
deletions must reach the neighbour in order with the publications queued before them (a
proxy `remove` must not overtake the copies it still covers), and survive the link's own
outages. The link already has a channel with exactly those properties: the link session's
queue. So control messages are ordinary PUBLISHes on the reserved topic `$link/control`
(the role of IBM MQ's inter-broker control queue), consumed by the link and never routed or
journaled; only `reach` skips the queue (docs/network.md §4-§5).

The payload is JSON, UTF-8, compact with sorted keys: readable in a packet capture, stable
bytes for equal messages, and extensible - `decode` ignores fields it does not know, so a
later link version can add some. Everything else is checked: a peer's bug must be caught at
the link with a message naming the op and the field, not as a `KeyError` deep inside
`Links`. `ControlError` is a `ValueError`.

`sync` sends a whole proxy set, which can be large, so `sync_parts` cuts it into messages of
bounded size: the receiver marks at part 0 and sweeps after the part marked `last`, and a
set that shrank to nothing still needs that sweep, hence at least one part.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..protocol.topics import forbidden_character
from .envelope import broker_name_error

CONTROL_TOPIC: Final = "$link/control"
# The ops (`ProxyChange.op` is "add" or "remove").
SYNC: Final = "sync"
RETAINED_DONE: Final = "retained-done"
REACH: Final = "reach"
DELETE_RETAINED: Final = "delete-retained"
SYNC_PART_BYTES: Final = 256 * 1024

_SEPARATORS: Final = (",", ":")


class ControlError(ValueError):
    """A control message that cannot be decoded; the message names the problem."""


@dataclass(frozen=True, slots=True)
class Sync:
    """Part `part` (from 0) of the sender's whole proxy set for this link connection
    (`epoch`); `last` on the final part. `subs`: `(sub point, filter)` pairs."""

    epoch: int
    part: int
    last: bool
    subs: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ProxyChange:
    """One proxy subscription added (`op` "add") or removed ("remove") after the `sync`."""

    op: Literal["add", "remove"]
    epoch: int
    sub_point: str
    topic_filter: str


@dataclass(frozen=True, slots=True)
class RetainedDone:
    """The retained answer to the new proxy `(sub_point, topic_filter)` is complete."""

    epoch: int
    sub_point: str
    topic_filter: str


@dataclass(frozen=True, slots=True)
class Reach:
    """The paths to the brokers reachable through the sender, each starting with it: lists,
    as `Topology.announcement` gives them and `Topology.check` takes them."""

    paths: list[list[str]]


@dataclass(frozen=True, slots=True)
class DeleteRetained:
    """Delete the retained message of `topic` at `sub_point` (made at broker `origin`)."""

    sub_point: str
    topic: str
    origin: str


ControlMessage = Sync | ProxyChange | RetainedDone | Reach | DeleteRetained


# ---------------------------------------------------------------------------
# Encoding


def _as_object(message: ControlMessage) -> dict[str, Any]:
    if isinstance(message, Sync):
        return {
            "op": SYNC,
            "epoch": message.epoch,
            "part": message.part,
            "last": message.last,
            "subs": [[sp, topic_filter] for sp, topic_filter in message.subs],
        }
    if isinstance(message, ProxyChange):
        return {
            "op": message.op,
            "epoch": message.epoch,
            "sp": message.sub_point,
            "filter": message.topic_filter,
        }
    if isinstance(message, RetainedDone):
        return {
            "op": RETAINED_DONE,
            "epoch": message.epoch,
            "sp": message.sub_point,
            "filter": message.topic_filter,
        }
    if isinstance(message, Reach):
        return {"op": REACH, "paths": [list(path) for path in message.paths]}
    return {
        "op": DELETE_RETAINED,
        "sp": message.sub_point,
        "topic": message.topic,
        "origin": message.origin,
    }


def _dumps(value: object) -> bytes:
    return json.dumps(
        value, ensure_ascii=False, sort_keys=True, separators=_SEPARATORS, allow_nan=False
    ).encode("utf-8")


def encode(message: ControlMessage) -> bytes:
    """The payload of `message`: compact JSON, sorted keys, UTF-8."""
    return _dumps(_as_object(message))


def sync_parts(
    epoch: int, subs: Iterable[tuple[str, str]], max_bytes: int = SYNC_PART_BYTES
) -> list[Sync]:
    """The `sync` of the set `subs` in parts of at most `max_bytes` encoded, in order: at
    least one (an empty set is one empty last part), numbered from 0, `last` on the final
    one. `ValueError` when `max_bytes` cannot hold a pair, or an empty part."""
    if len(encode(Sync(epoch, 0, True, ()))) > max_bytes:
        raise ValueError(f"sync: {max_bytes} bytes cannot hold even an empty part")
    parts: list[Sync] = []
    current: list[tuple[str, str]] = []
    size = 0  # encoded size of the part being filled
    for sub_point, topic_filter in subs:
        pair_size = len(_dumps([sub_point, topic_filter]))
        if current and size + 1 + pair_size > max_bytes:  # 1: the comma before it
            parts.append(Sync(epoch, len(parts), False, tuple(current)))
            current = []
        if current:
            size += 1 + pair_size
        else:
            # Measured with "last": false, one byte longer than true: a bound for either.
            size = len(encode(Sync(epoch, len(parts), False, ()))) + pair_size
            if size > max_bytes:
                raise ValueError(
                    f"sync: the pair {[sub_point, topic_filter]!r} does not fit "
                    f"a part of {max_bytes} bytes"
                )
        current.append((sub_point, topic_filter))
    parts.append(Sync(epoch, len(parts), True, tuple(current)))
    return parts


# ---------------------------------------------------------------------------
# Decoding


def _field(obj: dict[str, Any], op: str, name: str) -> object:
    if name not in obj:
        raise ControlError(f"control message {op!r}: field {name!r} is missing")
    value: object = obj[name]
    return value


def _int(obj: dict[str, Any], op: str, name: str) -> int:
    value = _field(obj, op, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ControlError(f"control message {op!r}: field {name!r} must be a non-negative integer")
    return value


def _bool(obj: dict[str, Any], op: str, name: str) -> bool:
    value = _field(obj, op, name)
    if not isinstance(value, bool):
        raise ControlError(f"control message {op!r}: field {name!r} must be true or false")
    return value


def _text_problem(value: str) -> str | None:
    """Why `value` cannot be an MQTT string (§1.5.4), or None."""
    if value.isprintable():
        return None
    forbidden = forbidden_character(value)
    if forbidden is not None:
        return f"contains {forbidden}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None


def _str(obj: dict[str, Any], op: str, name: str, empty: bool = True) -> str:
    value = _field(obj, op, name)
    if not isinstance(value, str):
        raise ControlError(f"control message {op!r}: field {name!r} must be a string")
    if not empty and not value:
        raise ControlError(f"control message {op!r}: field {name!r} must not be empty")
    problem = _text_problem(value)
    if problem is not None:
        raise ControlError(f"control message {op!r}: field {name!r} {problem}")
    return value


def _broker(obj: dict[str, Any], op: str, name: str) -> str:
    value = _str(obj, op, name)
    problem = broker_name_error(value)
    if problem is not None:
        raise ControlError(f"control message {op!r}: field {name!r}: {problem}")
    return value


def _subs(obj: dict[str, Any], op: str) -> tuple[tuple[str, str], ...]:
    value = _field(obj, op, "subs")
    if not isinstance(value, list):
        raise ControlError(f"control message {op!r}: field 'subs' must be a list")
    subs: list[tuple[str, str]] = []
    for index, item in enumerate(value):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], str)
            or not item[1]
        ):
            raise ControlError(
                f"control message {op!r}: field 'subs' item {index} must be a pair "
                "[sub point, filter] of strings, the filter not empty"
            )
        problem = _text_problem(item[0]) or _text_problem(item[1])
        if problem is not None:
            raise ControlError(f"control message {op!r}: field 'subs' item {index} {problem}")
        subs.append((item[0], item[1]))
    return tuple(subs)


def _paths(obj: dict[str, Any], op: str) -> list[list[str]]:
    value = _field(obj, op, "paths")
    if not isinstance(value, list):
        raise ControlError(f"control message {op!r}: field 'paths' must be a list")
    paths: list[list[str]] = []
    for index, item in enumerate(value):
        if not isinstance(item, list) or not item:
            raise ControlError(
                f"control message {op!r}: field 'paths' item {index} must be a non-empty "
                "list of broker names"
            )
        for name in item:
            problem = "not a string" if not isinstance(name, str) else broker_name_error(name)
            if problem is not None:
                raise ControlError(f"control message {op!r}: field 'paths' item {index}: {problem}")
        paths.append([str(name) for name in item])
    return paths


def decode(payload: bytes) -> ControlMessage:
    """The control message in `payload`; `ControlError` naming the problem when it is not
    UTF-8 JSON, not an object, has an unknown op, or a field is missing or mistyped.
    Fields an op does not know are ignored."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ControlError(f"control message is not UTF-8: {exc}") from None
    try:
        obj: object = json.loads(text)
    except (ValueError, RecursionError) as exc:  # also too many digits, or nesting
        raise ControlError(f"control message is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ControlError(f"control message is not a JSON object: {type(obj).__name__}")
    if "op" not in obj:
        raise ControlError("control message has no 'op'")
    op = obj["op"]
    if not isinstance(op, str):
        raise ControlError("control message: field 'op' must be a string")
    if op == "add" or op == "remove":
        return ProxyChange(
            "add" if op == "add" else "remove",
            _int(obj, op, "epoch"),
            _str(obj, op, "sp"),
            _str(obj, op, "filter", empty=False),
        )
    if op == SYNC:
        return Sync(
            _int(obj, op, "epoch"), _int(obj, op, "part"), _bool(obj, op, "last"), _subs(obj, op)
        )
    if op == RETAINED_DONE:
        return RetainedDone(
            _int(obj, op, "epoch"), _str(obj, op, "sp"), _str(obj, op, "filter", empty=False)
        )
    if op == REACH:
        return Reach(_paths(obj, op))
    if op == DELETE_RETAINED:
        return DeleteRetained(
            _str(obj, op, "sp"), _str(obj, op, "topic", empty=False), _broker(obj, op, "origin")
        )
    raise ControlError(f"control message: unknown op {op!r}")
