"""The Sparkplug B protobuf messages, described in code (no protoc, no generated module).

The Sparkplug 3.0 specification defines its payload as the proto2 file ``sparkplug_b.proto``
(package ``org.eclipse.tahu.protobuf``): one ``Payload`` message with the nested messages
``Template`` (and its ``Parameter``), ``DataSet`` (``DataSetValue``, ``Row``),
``PropertyValue``, ``PropertySet``, ``PropertySetList``, ``MetaData`` and ``Metric``. Here the
same definitions are written as a `FileDescriptorProto`, field by field with the numbers and
types of the specification, added to a private `DescriptorPool` (so a process that also loads
another copy of the file sees no conflict), and `message_factory.GetMessageClass` makes the
message class. The wire format is therefore exactly the specification's, and the protobuf
runtime (upb) does the byte work.

`PAYLOAD` is the message class of ``Payload``; its nested classes are reached through it
(``PAYLOAD.Metric`` ...). The ``extensions N to max`` ranges of the specification are kept,
so that extension fields sent by others are carried as unknown fields rather than refused.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "org.eclipse.tahu.protobuf"

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL = _F.LABEL_OPTIONAL
_REPEATED = _F.LABEL_REPEATED
_MAX = 536870912  # one past the largest field number: "to max"

# (name, number, type or message name, repeated?, oneof name)
_FieldSpec = tuple[str, int, "int | str", bool, str | None]

_SCALARS = {
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "float": _F.TYPE_FLOAT,
    "double": _F.TYPE_DOUBLE,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}


def _message(
    parent: Any,
    name: str,
    fields: list[tuple[str, int, str, bool, str | None]],
    extensions_from: int | None,
) -> descriptor_pb2.DescriptorProto:
    """Adds the message `name` to `parent` (a file or a message) with `fields`: each is
    (field name, number, a scalar type or a message's full name, repeated, oneof)."""
    message: descriptor_pb2.DescriptorProto = (
        parent.message_type.add() if hasattr(parent, "message_type") else parent.nested_type.add()
    )
    message.name = name
    oneofs: list[str] = []
    for field_name, number, kind, repeated, oneof in fields:
        field = message.field.add()
        field.name = field_name
        field.number = number
        field.label = _REPEATED if repeated else _OPTIONAL
        if kind in _SCALARS:
            field.type = _SCALARS[kind]
        else:
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.{kind}"
        if oneof is not None:
            if oneof not in oneofs:
                oneofs.append(oneof)
                message.oneof_decl.add().name = oneof
            field.oneof_index = oneofs.index(oneof)
    if extensions_from is not None:
        extension_range = message.extension_range.add()
        extension_range.start = extensions_from
        extension_range.end = _MAX
    return message


def _value_fields(first: int, kinds: list[tuple[str, str]], extension: str) -> list[Any]:
    """The fields of a ``oneof value`` numbered from `first`, ending with its extension."""
    fields: list[Any] = [
        (name, first + i, kind, False, "value") for i, (name, kind) in enumerate(kinds)
    ]
    fields.append(("extension_value", first + len(kinds), extension, False, "value"))
    return fields


_SIMPLE_VALUES = [
    ("int_value", "uint32"),
    ("long_value", "uint64"),
    ("float_value", "float"),
    ("double_value", "double"),
    ("boolean_value", "bool"),
    ("string_value", "string"),
]


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto()
    file.name = "telemq/sparkplug_b.proto"
    file.package = PACKAGE
    file.syntax = "proto2"
    payload = _message(
        file,
        "Payload",
        [
            ("timestamp", 1, "uint64", False, None),
            ("metrics", 2, "Payload.Metric", True, None),
            ("seq", 3, "uint64", False, None),
            ("uuid", 4, "string", False, None),
            ("body", 5, "bytes", False, None),
        ],
        6,
    )
    template = _message(
        payload,
        "Template",
        [
            ("version", 1, "string", False, None),
            ("metrics", 2, "Payload.Metric", True, None),
            ("parameters", 3, "Payload.Template.Parameter", True, None),
            ("template_ref", 4, "string", False, None),
            ("is_definition", 5, "bool", False, None),
        ],
        6,
    )
    parameter = _message(
        template,
        "Parameter",
        [
            ("name", 1, "string", False, None),
            ("type", 2, "uint32", False, None),
            *_value_fields(3, _SIMPLE_VALUES, "Payload.Template.Parameter.ParameterValueExtension"),
        ],
        None,
    )
    _message(parameter, "ParameterValueExtension", [], 1)
    dataset = _message(
        payload,
        "DataSet",
        [
            ("num_of_columns", 1, "uint64", False, None),
            ("columns", 2, "string", True, None),
            ("types", 3, "uint32", True, None),
            ("rows", 4, "Payload.DataSet.Row", True, None),
        ],
        5,
    )
    dataset_value = _message(
        dataset,
        "DataSetValue",
        _value_fields(1, _SIMPLE_VALUES, "Payload.DataSet.DataSetValue.DataSetValueExtension"),
        None,
    )
    _message(dataset_value, "DataSetValueExtension", [], 1)
    _message(dataset, "Row", [("elements", 1, "Payload.DataSet.DataSetValue", True, None)], 2)
    property_value = _message(
        payload,
        "PropertyValue",
        [
            ("type", 1, "uint32", False, None),
            ("is_null", 2, "bool", False, None),
            *_value_fields(
                3,
                [
                    *_SIMPLE_VALUES,
                    ("propertyset_value", "Payload.PropertySet"),
                    ("propertysets_value", "Payload.PropertySetList"),
                ],
                "Payload.PropertyValue.PropertyValueExtension",
            ),
        ],
        None,
    )
    _message(property_value, "PropertyValueExtension", [], 1)
    _message(
        payload,
        "PropertySet",
        [("keys", 1, "string", True, None), ("values", 2, "Payload.PropertyValue", True, None)],
        3,
    )
    _message(payload, "PropertySetList", [("propertyset", 1, "Payload.PropertySet", True, None)], 2)
    _message(
        payload,
        "MetaData",
        [
            ("is_multi_part", 1, "bool", False, None),
            ("content_type", 2, "string", False, None),
            ("size", 3, "uint64", False, None),
            ("seq", 4, "uint64", False, None),
            ("file_name", 5, "string", False, None),
            ("file_type", 6, "string", False, None),
            ("md5", 7, "string", False, None),
            ("description", 8, "string", False, None),
        ],
        9,
    )
    metric = _message(
        payload,
        "Metric",
        [
            ("name", 1, "string", False, None),
            ("alias", 2, "uint64", False, None),
            ("timestamp", 3, "uint64", False, None),
            ("datatype", 4, "uint32", False, None),
            ("is_historical", 5, "bool", False, None),
            ("is_transient", 6, "bool", False, None),
            ("is_null", 7, "bool", False, None),
            ("metadata", 8, "Payload.MetaData", False, None),
            ("properties", 9, "Payload.PropertySet", False, None),
            *_value_fields(
                10,
                [
                    *_SIMPLE_VALUES,
                    ("bytes_value", "bytes"),
                    ("dataset_value", "Payload.DataSet"),
                    ("template_value", "Payload.Template"),
                ],
                "Payload.Metric.MetricValueExtension",
            ),
        ],
        None,
    )
    _message(metric, "MetricValueExtension", [], 1)
    return file


def _payload_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.Payload"))


PAYLOAD: Any = _payload_class()
"""The message class of the specification's ``Payload``."""
