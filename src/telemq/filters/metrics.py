"""What ``Metric['<name>']`` reads: the metrics of a Sparkplug B payload, by name.

Theory of operation
-------------------
A filter's ``Metric['Pressure']`` is the value of the metric named ``Pressure`` in the
publication's payload when the publication is Sparkplug B: its topic is in the ``spBv1.0``
namespace (`telemq.sparkplug.parse_topic`), it is not a STATE message, and its payload
decodes as the specification's protobuf message (`telemq.sparkplug.decode_payload`, with
the BIRTH checks for a BIRTH). `metric_values` turns such a payload into one flat dict,
name -> value, in the JSON model the evaluator works in:

- every integer datatype and DateTime (milliseconds) -> ``float``; Float and Double ->
  ``float`` (NaN is NULL: no comparison means the same for it in Python and Spark);
  Boolean -> ``bool``; String, Text and UUID -> ``str``;
- a metric with another kind of value (Bytes, File, arrays, DataSet, Template) is present
  but not comparable: `OPAQUE`, like a JSON object (``IS NULL`` is FALSE, every comparison
  UNKNOWN);
- a metric flagged ``is_null``, or with no value, is absent (NULL);
- a metric without a name (an alias alone, whose name is in its BIRTH) or without a
  datatype (whose type is in its BIRTH) is absent: the filter reads what the payload
  itself says, so the broker and Spark give one answer whatever BIRTHs each has seen;
- a name given twice (historical values in one DATA message): the first one.

A certificate, the broker's retained copy of a BIRTH on
``$sparkplug/certificates/spBv1.0/...`` (docs/sparkplug.md), is read as the BIRTH it copies.

The result is None when the publication is not Sparkplug B (then every ``Metric[...]`` is
NULL). The same function is the Python evaluator's (`Message.metrics`) and the Spark
backend's (a Python UDF in `spark`), so both read the same values by construction.

protobuf is imported on the first call, so a filter without ``Metric`` never loads it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OPAQUE", "Opaque", "metric_values"]

_PREFIX: Final = "spBv1.0/"
_CERTIFICATES: Final = "$sparkplug/certificates/"


class Opaque:
    """The type of `OPAQUE`: a present metric value no operator can compare."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "OPAQUE"


OPAQUE: Final = Opaque()


def metric_values(
    topic: object, payload: bytes | bytearray | memoryview | None
) -> dict[str, object] | None:
    """The named, typed metrics of a Sparkplug B publication (see the module docstring);
    None when `topic` and `payload` are not a Sparkplug B publication with metrics."""
    if type(topic) is not str or payload is None:
        return None
    if topic.startswith(_CERTIFICATES):
        topic = topic[len(_CERTIFICATES) :]  # the broker's retained copy of a BIRTH
    if not topic.startswith(_PREFIX):
        return None
    from ..sparkplug import (
        MessageType,
        SparkplugPayloadError,
        SparkplugTopicError,
        decode_payload,
        parse_topic,
    )

    try:
        kind = parse_topic(topic).message_type
        if kind is MessageType.STATE:
            return None
        decoded = decode_payload(bytes(payload), kind)
    except (SparkplugTopicError, SparkplugPayloadError):
        return None
    values: dict[str, object] = {}
    seen: set[str] = set()
    for metric in decoded.metrics:
        name = metric.name
        if name is None or name in seen:
            continue
        seen.add(name)
        if metric.datatype is not None and not metric.is_null and metric.value is not None:
            value = _filter_value(metric.value)
            if value is not None:
                values[name] = value
    return values


def _filter_value(value: object) -> object:
    """A decoded metric value in the filters' JSON model."""
    t = type(value)
    if t is float:
        return value if value == value else None  # NaN: NULL (Spark orders NaN above all)
    if t is bool or t is str:
        return value
    if t is int:
        return float(value)  # type: ignore[arg-type]
    return OPAQUE
