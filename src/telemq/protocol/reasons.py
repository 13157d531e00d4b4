"""Why a connection ended: MQTT 5.0's reason codes, used for every protocol level.

MQTT 3.1.1 has no way to tell a client why the server closed its connection; the code is for
the log, for hooks and for `$SYS`, and MQTT 5.0 will send it in DISCONNECT. The values are
MQTT 5.0's (section 2.4), so nothing changes meaning when that protocol arrives.
"""

from __future__ import annotations

import enum

from .packets import ConnectReturnCode


class ReasonCode(enum.IntEnum):
    NORMAL_DISCONNECTION = 0x00
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_SHUTTING_DOWN = 0x8B
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_NAME_INVALID = 0x90
    PACKET_TOO_LARGE = 0x95
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98

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
