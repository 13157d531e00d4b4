"""Why a connection ended: MQTT 5.0's reason codes, used for every protocol level.

MQTT 3.1.1 has no way to tell a client why the server closed its connection; there the code
is for the log, for hooks and for `$SYS`. An MQTT 5.0 client is sent it in DISCONNECT (or in
CONNACK, before the connection is accepted). The values are MQTT 5.0's (section 2.4, Table
2-6), so a code means the same thing at every level.
"""

from __future__ import annotations

import enum

from .packets import ConnectReturnCode


class ReasonCode(enum.IntEnum):
    NORMAL_DISCONNECTION = 0x00  # also "success" and "granted QoS 0"
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2

    @property
    def label(self) -> str:
        """For the log: `0x81 malformed packet`."""
        return f"0x{self.value:02X} {self.name.lower().replace('_', ' ')}"


# The CONNACK return codes of MQTT 3.1/3.1.1 and the reason each refusal stands for.
REFUSAL_REASONS: dict[ConnectReturnCode, ReasonCode] = {
    ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION: ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    ConnectReturnCode.IDENTIFIER_REJECTED: ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
    ConnectReturnCode.SERVER_UNAVAILABLE: ReasonCode.SERVER_UNAVAILABLE,
    ConnectReturnCode.BAD_USERNAME_OR_PASSWORD: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
    ConnectReturnCode.NOT_AUTHORIZED: ReasonCode.NOT_AUTHORIZED,
}


def pre_5_refusal(packet: bytes) -> ReasonCode | None:
    """The 5.0 reason code of a refusing 3.1/3.1.1 CONNACK (`20 02 00 rc`, rc 1-5), or None:
    how a server without MQTT 5.0 answers a level-5 CONNECT (return code 1,
    [MQTT-3.1.2-2]), which a 5.0 client must read as a refusal, not a malformed CONNACK."""
    if len(packet) < 4 or packet[0] != 0x20 or packet[1] != 2 or not 1 <= packet[3] <= 5:
        return None
    return REFUSAL_REASONS[ConnectReturnCode(packet[3])]
