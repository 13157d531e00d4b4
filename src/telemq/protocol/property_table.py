"""MQTT 5.0's properties as data: identifiers, types and carriers, and the `Properties` record.

Theory of operation
-------------------
Table 2-4 of the standard (§2.2.2.2) gives every property an identifier (`PropertyId`), the
data type of its value (`PropertyType`, §1.5) and the packets that may carry it: a
`PropertyContext` names a carrier (a packet type, or the Will Properties of CONNECT's
payload). `PROPERTY_TABLE` is that table; the codec (properties.py) reads it, indexed by
identifier, to parse and to check a block.

`Properties` has one field per property, None (or an empty list) when absent: the two that
may repeat are lists, in wire order (user properties keep their order and duplicates, as
§3.3.2.3.7 requires of a forwarding server). Every packet type of 5.0 carries one, and
every PUBLISH that has properties builds one, so it is a plain slotted class whose
`__init__` is compiled with it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class PropertyId(enum.IntEnum):
    """Property identifiers (§2.2.2.2, Table 2-4)."""

    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


class PropertyType(enum.IntEnum):
    """The data types of §1.5 a property value can have."""

    BYTE = 1
    TWO_BYTE_INTEGER = 2
    FOUR_BYTE_INTEGER = 3
    VARIABLE_BYTE_INTEGER = 4
    UTF8_STRING = 5
    BINARY_DATA = 6
    UTF8_STRING_PAIR = 7


class PropertyContext(enum.IntEnum):
    """What carries a property block: a packet (valued as its `PacketType`, AUTH being 15) or
    the Will Properties of CONNECT's payload."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    DISCONNECT = 14
    AUTH = 15
    WILL = 16


_C = PropertyContext
_T = PropertyType
_REPLIES = (_C.PUBACK, _C.PUBREC, _C.PUBREL, _C.PUBCOMP, _C.SUBACK, _C.UNSUBACK)


def _row(kind: PropertyType, *contexts: PropertyContext) -> tuple[PropertyType, frozenset[_C]]:
    """One row of the table: a value's type and the blocks that may carry it."""
    return kind, frozenset(contexts)


# Table 2-4: each property's type and the blocks that may carry it.
PROPERTY_TABLE: Final[dict[PropertyId, tuple[PropertyType, frozenset[PropertyContext]]]] = {
    PropertyId.PAYLOAD_FORMAT_INDICATOR: _row(_T.BYTE, _C.PUBLISH, _C.WILL),
    PropertyId.MESSAGE_EXPIRY_INTERVAL: _row(_T.FOUR_BYTE_INTEGER, _C.PUBLISH, _C.WILL),
    PropertyId.CONTENT_TYPE: _row(_T.UTF8_STRING, _C.PUBLISH, _C.WILL),
    PropertyId.RESPONSE_TOPIC: _row(_T.UTF8_STRING, _C.PUBLISH, _C.WILL),
    PropertyId.CORRELATION_DATA: _row(_T.BINARY_DATA, _C.PUBLISH, _C.WILL),
    PropertyId.SUBSCRIPTION_IDENTIFIER: _row(_T.VARIABLE_BYTE_INTEGER, _C.PUBLISH, _C.SUBSCRIBE),
    PropertyId.SESSION_EXPIRY_INTERVAL: _row(
        _T.FOUR_BYTE_INTEGER, _C.CONNECT, _C.CONNACK, _C.DISCONNECT
    ),
    PropertyId.ASSIGNED_CLIENT_IDENTIFIER: _row(_T.UTF8_STRING, _C.CONNACK),
    PropertyId.SERVER_KEEP_ALIVE: _row(_T.TWO_BYTE_INTEGER, _C.CONNACK),
    PropertyId.AUTHENTICATION_METHOD: _row(_T.UTF8_STRING, _C.CONNECT, _C.CONNACK, _C.AUTH),
    PropertyId.AUTHENTICATION_DATA: _row(_T.BINARY_DATA, _C.CONNECT, _C.CONNACK, _C.AUTH),
    PropertyId.REQUEST_PROBLEM_INFORMATION: _row(_T.BYTE, _C.CONNECT),
    PropertyId.WILL_DELAY_INTERVAL: _row(_T.FOUR_BYTE_INTEGER, _C.WILL),
    PropertyId.REQUEST_RESPONSE_INFORMATION: _row(_T.BYTE, _C.CONNECT),
    PropertyId.RESPONSE_INFORMATION: _row(_T.UTF8_STRING, _C.CONNACK),
    PropertyId.SERVER_REFERENCE: _row(_T.UTF8_STRING, _C.CONNACK, _C.DISCONNECT),
    PropertyId.REASON_STRING: _row(_T.UTF8_STRING, _C.CONNACK, *_REPLIES, _C.DISCONNECT, _C.AUTH),
    PropertyId.RECEIVE_MAXIMUM: _row(_T.TWO_BYTE_INTEGER, _C.CONNECT, _C.CONNACK),
    PropertyId.TOPIC_ALIAS_MAXIMUM: _row(_T.TWO_BYTE_INTEGER, _C.CONNECT, _C.CONNACK),
    PropertyId.TOPIC_ALIAS: _row(_T.TWO_BYTE_INTEGER, _C.PUBLISH),
    PropertyId.MAXIMUM_QOS: _row(_T.BYTE, _C.CONNACK),
    PropertyId.RETAIN_AVAILABLE: _row(_T.BYTE, _C.CONNACK),
    PropertyId.USER_PROPERTY: _row(_T.UTF8_STRING_PAIR, *PropertyContext),
    PropertyId.MAXIMUM_PACKET_SIZE: _row(_T.FOUR_BYTE_INTEGER, _C.CONNECT, _C.CONNACK),
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE: _row(_T.BYTE, _C.CONNACK),
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE: _row(_T.BYTE, _C.CONNACK),
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE: _row(_T.BYTE, _C.CONNACK),
}


@dataclass(slots=True, init=False)
class Properties:
    """One property block; None (or an empty list) for an absent property.

    `__init__` (keyword arguments only) is written out: the one dataclasses would generate
    stays interpreted under mypyc, five times slower, and every PUBLISH builds one.
    """

    payload_format_indicator: int | None
    message_expiry_interval: int | None
    content_type: str | None
    response_topic: str | None
    correlation_data: bytes | None
    # Several only in PUBLISH (one per matching subscription), at most one in SUBSCRIBE.
    subscription_identifiers: list[int]
    session_expiry_interval: int | None
    assigned_client_identifier: str | None
    server_keep_alive: int | None
    authentication_method: str | None
    authentication_data: bytes | None
    request_problem_information: int | None
    will_delay_interval: int | None
    request_response_information: int | None
    response_information: str | None
    server_reference: str | None
    reason_string: str | None
    receive_maximum: int | None
    topic_alias_maximum: int | None
    topic_alias: int | None
    maximum_qos: int | None
    retain_available: int | None
    user_properties: list[tuple[str, str]]  # (name, value), in wire order
    maximum_packet_size: int | None
    wildcard_subscription_available: int | None
    subscription_identifier_available: int | None
    shared_subscription_available: int | None

    def __init__(
        self,
        *,
        payload_format_indicator: int | None = None,
        message_expiry_interval: int | None = None,
        content_type: str | None = None,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
        subscription_identifiers: list[int] | None = None,
        session_expiry_interval: int | None = None,
        assigned_client_identifier: str | None = None,
        server_keep_alive: int | None = None,
        authentication_method: str | None = None,
        authentication_data: bytes | None = None,
        request_problem_information: int | None = None,
        will_delay_interval: int | None = None,
        request_response_information: int | None = None,
        response_information: str | None = None,
        server_reference: str | None = None,
        reason_string: str | None = None,
        receive_maximum: int | None = None,
        topic_alias_maximum: int | None = None,
        topic_alias: int | None = None,
        maximum_qos: int | None = None,
        retain_available: int | None = None,
        user_properties: list[tuple[str, str]] | None = None,
        maximum_packet_size: int | None = None,
        wildcard_subscription_available: int | None = None,
        subscription_identifier_available: int | None = None,
        shared_subscription_available: int | None = None,
    ) -> None:
        self.payload_format_indicator = payload_format_indicator
        self.message_expiry_interval = message_expiry_interval
        self.content_type = content_type
        self.response_topic = response_topic
        self.correlation_data = correlation_data
        self.subscription_identifiers = (
            [] if subscription_identifiers is None else subscription_identifiers
        )
        self.session_expiry_interval = session_expiry_interval
        self.assigned_client_identifier = assigned_client_identifier
        self.server_keep_alive = server_keep_alive
        self.authentication_method = authentication_method
        self.authentication_data = authentication_data
        self.request_problem_information = request_problem_information
        self.will_delay_interval = will_delay_interval
        self.request_response_information = request_response_information
        self.response_information = response_information
        self.server_reference = server_reference
        self.reason_string = reason_string
        self.receive_maximum = receive_maximum
        self.topic_alias_maximum = topic_alias_maximum
        self.topic_alias = topic_alias
        self.maximum_qos = maximum_qos
        self.retain_available = retain_available
        self.user_properties = [] if user_properties is None else user_properties
        self.maximum_packet_size = maximum_packet_size
        self.wildcard_subscription_available = wildcard_subscription_available
        self.subscription_identifier_available = subscription_identifier_available
        self.shared_subscription_available = shared_subscription_available

    def is_empty(self) -> bool:
        """True when no property is set: the block is then the single byte 0x00."""
        return (
            not self.user_properties
            and not self.subscription_identifiers
            and self.payload_format_indicator is None
            and self.message_expiry_interval is None
            and self.content_type is None
            and self.response_topic is None
            and self.correlation_data is None
            and self.session_expiry_interval is None
            and self.assigned_client_identifier is None
            and self.server_keep_alive is None
            and self.authentication_method is None
            and self.authentication_data is None
            and self.request_problem_information is None
            and self.will_delay_interval is None
            and self.request_response_information is None
            and self.response_information is None
            and self.server_reference is None
            and self.reason_string is None
            and self.receive_maximum is None
            and self.topic_alias_maximum is None
            and self.topic_alias is None
            and self.maximum_qos is None
            and self.retain_available is None
            and self.maximum_packet_size is None
            and self.wildcard_subscription_available is None
            and self.subscription_identifier_available is None
            and self.shared_subscription_available is None
        )
