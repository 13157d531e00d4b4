"""Sparkplug B, pure: its topic namespace and its protobuf payloads, with no I/O.

`topic` parses ``spBv1.0/...`` topics, `payload` decodes, validates and encodes payloads
into typed dataclasses (`datatypes` holds the datatype rules, `schema` the protobuf message
definitions of the specification). The broker, the pipeline and the filters use it; it
uses nothing else of telemq (docs/sparkplug.md).
"""

from .datatypes import DataType
from .payload import (
    BirthMetric,
    DataSet,
    MetaData,
    Metric,
    Payload,
    PropertySet,
    PropertyValue,
    SparkplugPayloadError,
    Template,
    TemplateParameter,
    birth_aliases,
    decode_payload,
    encode_payload,
    resolve_metrics,
    validate_payload,
)
from .topic import (
    NAMESPACE,
    MessageType,
    SparkplugTopic,
    SparkplugTopicError,
    is_sparkplug_topic,
    parse_topic,
)

__all__ = [
    "NAMESPACE",
    "BirthMetric",
    "DataSet",
    "DataType",
    "MessageType",
    "MetaData",
    "Metric",
    "Payload",
    "PropertySet",
    "PropertyValue",
    "SparkplugPayloadError",
    "SparkplugTopic",
    "SparkplugTopicError",
    "Template",
    "TemplateParameter",
    "birth_aliases",
    "decode_payload",
    "encode_payload",
    "is_sparkplug_topic",
    "parse_topic",
    "resolve_metrics",
    "validate_payload",
]
