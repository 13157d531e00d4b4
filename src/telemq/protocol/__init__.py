"""Sans-IO MQTT 3.1 / 3.1.1 / 5.0: packets, codec, topic rules and the connection state machine.

Theory of operation
-------------------
Nothing in this package touches a socket, a thread, an event loop or a clock.
`codec` turns bytes into packet dataclasses and back (`codec5` for MQTT 5.0,
`properties` for its property blocks); `topics` validates and
matches topic names and filters; `Flows` keeps one session's QoS 1/2 state
(packet ids, in-flight tables); `Connection` is one server-side connection:
bytes in (`receive_data(data, now)`), events out, bytes to write from
`data_to_send()`, and timers through `next_timer()` / `handle_timer(now)`;
`DialConnection` is its client role, for a broker that dials another.
The broker owns the I/O and answers events; tests drive the same objects with
plain function calls.
"""

from .codec import (
    MAX_REMAINING_LENGTH,
    Decoder,
    decode_packet,
    encode,
    encode_publish,
    encode_publish5,
    encode_remaining_length,
)
from .codec5 import VALID_REASON_CODES
from .connection import Connection, ConnectionState
from .dial_packets import subscription_options
from .dialer import DialConnection
from .errors import (
    LocalProtocolError,
    MalformedPacket,
    PacketIdsExhausted,
    ProtocolError,
    RemoteProtocolError,
)
from .events import (
    AuthRequested,
    ConnectAcknowledged,
    ConnectionClosed,
    ConnectRequested,
    DeliveryAcknowledged,
    DeliveryReceived,
    DisconnectRequested,
    Event,
    MessageReceived,
    MessageReleased,
    SubscribeAcknowledged,
    SubscribeRequested,
    UnsubscribeAcknowledged,
    UnsubscribeRequested,
)
from .flows import RELEASED_IDS_KEPT, Flows, Inflight, InflightState, release_digest
from .lifecycle import ConnectionSettings
from .packets import (
    NO_LOCAL,
    RETAIN_AS_PUBLISHED,
    RETAIN_HANDLING,
    RETAIN_HANDLING_SHIFT,
    SUBACK_FAILURE,
    SUBSCRIPTION_QOS,
    Auth,
    ConnAck,
    Connect,
    ConnectReturnCode,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    ProtocolLevel,
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
from .properties import PropertyError, decode_properties, encode_properties
from .property_table import Properties, PropertyContext
from .reasons import ReasonCode
from .topics import (
    TopicLimits,
    is_wildcard_filter,
    shared_subscription,
    topic_filter_error,
    topic_matches,
    topic_name_error,
)

__all__ = [
    "MAX_REMAINING_LENGTH",
    "NO_LOCAL",
    "RELEASED_IDS_KEPT",
    "RETAIN_AS_PUBLISHED",
    "RETAIN_HANDLING",
    "RETAIN_HANDLING_SHIFT",
    "SUBACK_FAILURE",
    "SUBSCRIPTION_QOS",
    "VALID_REASON_CODES",
    "Auth",
    "AuthRequested",
    "ConnAck",
    "Connect",
    "ConnectAcknowledged",
    "ConnectRequested",
    "ConnectReturnCode",
    "Connection",
    "ConnectionClosed",
    "ConnectionSettings",
    "ConnectionState",
    "Decoder",
    "DeliveryAcknowledged",
    "DeliveryReceived",
    "DialConnection",
    "Disconnect",
    "DisconnectRequested",
    "Event",
    "Flows",
    "Inflight",
    "InflightState",
    "LocalProtocolError",
    "MalformedPacket",
    "MessageReceived",
    "MessageReleased",
    "Packet",
    "PacketIdsExhausted",
    "PacketType",
    "PingReq",
    "PingResp",
    "Properties",
    "PropertyContext",
    "PropertyError",
    "ProtocolError",
    "ProtocolLevel",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "ReasonCode",
    "RemoteProtocolError",
    "SubAck",
    "Subscribe",
    "SubscribeAcknowledged",
    "SubscribeRequested",
    "TopicLimits",
    "UnsubAck",
    "Unsubscribe",
    "UnsubscribeAcknowledged",
    "UnsubscribeRequested",
    "Will",
    "decode_packet",
    "decode_properties",
    "encode",
    "encode_properties",
    "encode_publish",
    "encode_publish5",
    "encode_remaining_length",
    "is_wildcard_filter",
    "release_digest",
    "shared_subscription",
    "subscription_options",
    "topic_filter_error",
    "topic_matches",
    "topic_name_error",
]
