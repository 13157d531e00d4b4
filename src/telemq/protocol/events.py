"""What a `Connection` (or the client role's `DialConnection`) reports to its owner after
reading bytes.

Events are facts about the peer ("it asked to subscribe"), never instructions.
The owner decides what to do and when: for QoS 1 and 2 it sends PUBACK/PUBREC
only after the publication is durable, which is why acknowledgements of
incoming publications are not sent by the state machine itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from .flows import OwnerRef
from .packets import Connect, Publish, Subscribe, Unsubscribe
from .property_table import Properties
from .reasons import ReasonCode

# The events made per message or per connection write their `__init__` out (`init=False`):
# the one dataclasses generates stays interpreted under mypyc, a Python call each time
# (0.15 to 0.3 us), where a written one is compiled like the rest (as `packets.Publish`).


@dataclass(slots=True, init=False)
class ConnectRequested:
    """The first packet: answer with `Connection.accept` or `Connection.refuse`."""

    packet: Connect

    def __init__(self, packet: Connect) -> None:
        self.packet = packet


@dataclass(slots=True, init=False)
class MessageReceived:
    """An incoming PUBLISH.

    `duplicate` is True for a QoS 2 PUBLISH whose packet id is already held
    (received, not yet released): it must be acknowledged with PUBREC again but
    not accepted a second time.
    """

    publish: Publish
    duplicate: bool

    def __init__(self, publish: Publish, duplicate: bool = False) -> None:
        self.publish = publish
        self.duplicate = duplicate


@dataclass(slots=True, init=False)
class MessageReleased:
    """PUBREL for an incoming QoS 2 publication: make it available, then PUBCOMP.

    `message` is what the owner stored with `Flows.hold_incoming` (None when the
    id is unknown, e.g. a PUBREL retried after the PUBCOMP was lost).
    """

    packet_id: int
    message: OwnerRef | None

    def __init__(self, packet_id: int, message: OwnerRef | None) -> None:
        self.packet_id = packet_id
        self.message = message


@dataclass(slots=True, init=False)
class DeliveryAcknowledged:
    """PUBACK (QoS 1) or PUBCOMP (QoS 2): the outbound delivery `ref` is complete."""

    packet_id: int
    ref: OwnerRef

    def __init__(self, packet_id: int, ref: OwnerRef) -> None:
        self.packet_id = packet_id
        self.ref = ref


@dataclass(slots=True, init=False)
class DeliveryReceived:
    """PUBREC for an outbound QoS 2 delivery: the owner sends PUBREL, then awaits PUBCOMP."""

    packet_id: int
    ref: OwnerRef

    def __init__(self, packet_id: int, ref: OwnerRef) -> None:
        self.packet_id = packet_id
        self.ref = ref


@dataclass(slots=True)
class SubscribeRequested:
    packet: Subscribe


@dataclass(slots=True)
class UnsubscribeRequested:
    packet: Unsubscribe


@dataclass(slots=True, init=False)
class DisconnectRequested:
    """A DISCONNECT from the client. The will is discarded, unless the reason code (MQTT
    5.0) is not 0 (normal disconnection): 0x04 asks for the will, and so does any error.

    `session_expiry_interval` (MQTT 5.0) is the new interval when the DISCONNECT sets one.
    """

    reason_code: int
    session_expiry_interval: int | None

    def __init__(self, reason_code: int = 0, session_expiry_interval: int | None = None) -> None:
        self.reason_code = reason_code
        self.session_expiry_interval = session_expiry_interval

    @property
    def keeps_will(self) -> bool:
        return self.reason_code != 0


@dataclass(slots=True)
class AuthRequested:
    """An AUTH from an MQTT 5.0 client, with its Authentication Data (enhanced
    authentication, §4.12): the next step of the exchange its CONNECT began, answered with
    `Connection.continue_authentication`, `accept` or `refuse`; or once connected, a step of
    a re-authentication (`starts_reauthentication` for the 0x19 that opens one), answered
    with `continue_authentication`, `reauthenticated` or `close`."""

    data: bytes | None
    starts_reauthentication: bool = False


@dataclass(slots=True, init=False)
class ConnectionClosed:
    """The connection is over. `reason` explains why, for the log, and `code` says it as
    an MQTT 5.0 reason code (`reasons.ReasonCode`).

    `graceful` is True only after a DISCONNECT packet; every other end
    (protocol error, keep-alive expiry, transport loss, server close) is
    abnormal, and publishes the will.
    """

    reason: str
    graceful: bool
    code: ReasonCode

    def __init__(
        self, reason: str, graceful: bool = False, code: ReasonCode = ReasonCode.UNSPECIFIED_ERROR
    ) -> None:
        self.reason = reason
        self.graceful = graceful
        self.code = code


@dataclass(slots=True)
class ConnectAcknowledged:
    """A `DialConnection`'s CONNACK. `return_code` 0 (an MQTT 5.0 reason code below 0x80):
    answer with `DialConnection.attach`; any other code is a refusal, and a
    `ConnectionClosed` follows. `properties` are the CONNACK's (5.0)."""

    return_code: int
    session_present: bool = False
    properties: Properties | None = None

    @property
    def reason_string(self) -> str | None:
        return self.properties.reason_string if self.properties is not None else None


@dataclass(slots=True)
class SubscribeAcknowledged:
    """SUBACK for `DialConnection.subscribe`: one return code (3.1/3.1.1: the granted QoS or
    0x80) or reason code (5.0) per topic filter, in their order."""

    packet_id: int
    return_codes: list[int]
    properties: Properties | None = None


@dataclass(slots=True)
class UnsubscribeAcknowledged:
    """UNSUBACK for `DialConnection.unsubscribe`: one reason code per topic filter at 5.0,
    none at 3.1/3.1.1."""

    packet_id: int
    reason_codes: list[int]
    properties: Properties | None = None


Event = (
    ConnectRequested
    | MessageReceived
    | MessageReleased
    | DeliveryAcknowledged
    | DeliveryReceived
    | SubscribeRequested
    | UnsubscribeRequested
    | DisconnectRequested
    | AuthRequested
    | ConnectionClosed
    | ConnectAcknowledged
    | SubscribeAcknowledged
    | UnsubscribeAcknowledged
)
