"""One publication as filters see it: `Message`, its JSON payload and its properties.

Theory of operation
-------------------
Filters read a message's payload as JSON and its properties by name. `Message` holds both:
the payload is parsed at most once (`parse_payload`), on the first payload field any filter
reads, so a publication tried against many filters is parsed once for all of them, and not
at all when none reads the payload. Likewise a Sparkplug B payload is decoded at most once,
on the first ``Metric['<name>']`` read (`metrics`), never for filters without one.

Values are those of the JSON model the evaluator works in (evaluate.py): ``float`` for every
number (JSON integers are read as doubles, like Spark's ``DOUBLE``), ``str``, ``bool``,
``None`` and ``dict``/``list``. Parsing is strict so that both backends see the same
document: what Spark's ``parse_json`` rejects is not JSON here either.

A message's properties are one flat dict, name -> value, read by a dict lookup per
``Properties.<name>``: the fixed names of `ast.PROPERTY_NAMES`, and ``User.<name>`` for the
MQTT 5.0 User Property ``<name>`` (so ``Properties.User.site`` reads the key
``User.site``); a missing key is NULL. `normalize_properties` brings what a caller gives
into that model; the broker, which builds one message per routed publication, gives it
ready (`Message.prepared`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cached_property

from . import ast
from .metrics import metric_values

__all__ = ["Message", "normalize_properties", "parse_payload"]


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key")
    return obj


_DECODER = json.JSONDecoder(
    parse_int=float, parse_constant=_reject_constant, object_pairs_hook=_object
)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_payload(payload: bytes | bytearray | memoryview) -> object:
    """The payload as a JSON value, or ``None`` when it is not JSON.

    Strict: UTF-8 only, one JSON value with optional surrounding whitespace, no ``NaN`` or
    ``Infinity``, no duplicate object keys, no unpaired surrogate escapes (``"\\ud800"``).
    Those are also what Spark's ``parse_json`` rejects, so both backends see the same
    document. Numbers become ``float``.
    """
    try:
        text = bytes(payload).decode("utf-8")
        doc = _DECODER.decode(text)
    except (ValueError, RecursionError):
        return None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(doc):
        return None
    return doc


def _has_lone_surrogate(doc: object) -> bool:
    """True if a string or key in `doc` holds an unpaired surrogate (pairs were joined)."""
    stack = [doc]
    while stack:
        v = stack.pop()
        if type(v) is str:
            if _SURROGATE.search(v):
                return True
        elif type(v) is list:
            stack.extend(v)
        elif type(v) is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
    return False


_TEXT_PROPERTIES = frozenset({"ContentType"})  # strings in MQTT: any other value is NULL
_VALUE_PROPERTIES = frozenset(ast.PROPERTY_NAMES) - _TEXT_PROPERTIES


def normalize_properties(properties: Mapping[str, object] | None) -> dict[str, object]:
    """Keep the known property keys, with values in the JSON model (numbers as float).

    Known keys are `ast.PROPERTY_NAMES` and ``User.<name>`` (MQTT 5.0 User Properties).
    Booleans stay booleans; ints and floats become float; bytes are decoded as UTF-8;
    anything else (or undecodable bytes) is NULL. ``ContentType`` and ``User.<name>`` are
    strings in MQTT, so for them only a string (or UTF-8 bytes) is a value.
    """
    out: dict[str, object] = {}
    for key, value in (properties or {}).items():
        if key in _VALUE_PROPERTIES:
            out[str(key)] = _normalize(value)
        elif key in _TEXT_PROPERTIES or (
            isinstance(key, str) and key.startswith(ast.USER_PROPERTY_PREFIX)
        ):
            out[str(key)] = _text(value)
    return out


def _normalize(value: object) -> object:
    t = type(value)
    if t is str or t is bool or t is float:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int | float):
        return float(value)
    return _text(value)


def _text(value: object) -> str | None:
    """`value` as a string property: a str, UTF-8 bytes decoded, else NULL."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


class Message:
    """One publication as filters see it: properties normalised, payload parsed lazily.

    Build one per publication and evaluate every filter against it: the JSON payload is
    parsed at most once, on the first payload field any filter reads.
    """

    def __init__(
        self,
        payload: bytes | bytearray | memoryview,
        properties: Mapping[str, object] | None = None,
    ) -> None:
        self.payload = payload
        self.properties = normalize_properties(properties)

    @classmethod
    def prepared(
        cls, payload: bytes | bytearray | memoryview, properties: dict[str, object]
    ) -> Message:
        """A Message over `properties` as given: the caller guarantees what normalising
        would make of them (known names; str, bool or float values; str for
        ``ContentType`` and ``User.<name>``, the first value of a repeated user property).
        The broker builds one per routed publication, so the copy is worth skipping."""
        message = cls.__new__(cls)
        message.payload = payload
        message.properties = properties
        return message

    @cached_property
    def document(self) -> object:
        """The parsed payload (see `parse_payload`); ``None`` when it is not JSON."""
        return parse_payload(self.payload)

    @cached_property
    def metrics(self) -> dict[str, object] | None:
        """The payload's Sparkplug B metrics by name (`metrics.metric_values`), decoded on
        the first ``Metric[...]`` a filter reads; None when it is not Sparkplug B."""
        return metric_values(self.properties.get("Topic"), self.payload)
