"""What an MQTT 5.0 connection adds to the state machine: both sides' limits and aliases.

Theory of operation
-------------------
An MQTT 5.0 CONNECT and CONNACK exchange limits: each side says how many unacknowledged
QoS 1/2 PUBLISHes it takes (Receive Maximum), the largest packet it takes (Maximum Packet
Size) and how many topic aliases the other may use toward it (Topic Alias Maximum). The
server also says which features it offers. `ServerLimits5` is the server's half, the same
for every connection of a broker (built once from its configuration); `Peer5` is the
client's half (its fixed limits a `ClientLimits5`, one object shared by every connection
that states the same) and the per-connection state those limits govern:

- inbound topic aliases (alias -> topic name), set and used by the client's PUBLISHes;
- outbound topic aliases (topic name -> alias), chosen by the server, first come first
  served up to the client's maximum, never reassigned (no eviction: a topic beyond the
  maximum goes out with its name);
- the packet ids of the client's QoS 1/2 PUBLISHes not yet answered (PUBACK, PUBCOMP, or
  PUBREC with an error), which the server's Receive Maximum bounds [MQTT-3.3.4-7];
- the packet ids in flight a resumed session could not re-send yet: beyond the client's
  Receive Maximum, they go as acknowledgements free room;
- what a PUBLISH to the client may be: no larger than its Maximum Packet Size;
- the Authentication Method of its CONNECT, which every AUTH of the connection repeats
  (enhanced authentication, §4.12), and whether a re-authentication is under way.

A `Connection` holds a `Peer5` only at protocol level 5, so 3.1/3.1.1 connections pay
nothing for any of it. Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .codec import encode, encode_ack
from .codec5 import CONNACK_REASONS, DISCONNECT_REASONS, encode_publish5
from .flows import Flows, Inflight, InflightState
from .packets import (
    Auth,
    ConnAck,
    Disconnect,
    PacketType,
    ProtocolLevel,
    Publish,
    Subscribe,
    Will,
)
from .property_table import Properties
from .reasons import ReasonCode
from .wire import encode_remaining_length

_FINE = ReasonCode.NORMAL_DISCONNECTION

# The largest packet MQTT can frame: 1 byte of header, 4 of remaining length, 268,435,455.
MAX_MQTT_PACKET = 268_435_460
NO_EXPIRY = 0xFFFFFFFF  # a Session Expiry Interval that never ends (§3.1.2.11.2)
MAX_REASON_STRING = 200  # characters of a reason sent in CONNACK or DISCONNECT
_MQTT_5 = ProtocolLevel.MQTT_5


@dataclass(slots=True, frozen=True)
class ServerLimits5:
    """The server's side of the MQTT 5.0 limits, advertised in every CONNACK.

    `maximum_packet_size` is also the decoder's limit, at every protocol level. The
    availability flags say what this server implements and the configuration allows.
    """

    receive_maximum: int = 1024
    maximum_qos: int = 2
    retain_available: bool = True
    maximum_packet_size: int = 1024 * 1024
    topic_alias_maximum: int = 64
    wildcard_subscription_available: bool = True
    subscription_identifier_available: bool = True
    shared_subscription_available: bool = True
    max_session_expiry_interval: int = NO_EXPIRY  # longer requests are shortened to this
    server_keep_alive: int = 0  # 0: the client's keep-alive; else at most this many seconds

    def connack_properties(self) -> Properties:
        """The CONNACK properties that state these limits; defaults are left out."""
        return Properties(
            receive_maximum=self.receive_maximum if self.receive_maximum < 65535 else None,
            maximum_qos=self.maximum_qos if self.maximum_qos < 2 else None,
            retain_available=None if self.retain_available else 0,
            maximum_packet_size=(
                self.maximum_packet_size if self.maximum_packet_size < MAX_MQTT_PACKET else None
            ),
            topic_alias_maximum=self.topic_alias_maximum or None,
            wildcard_subscription_available=None if self.wildcard_subscription_available else 0,
            subscription_identifier_available=(
                None if self.subscription_identifier_available else 0
            ),
            shared_subscription_available=None if self.shared_subscription_available else 0,
        )

    def will_refusal(self, will: Will) -> tuple[ReasonCode, str] | None:
        """Why a CONNECT's will could not be published as given, or None: its QoS above
        Maximum QoS, or RETAIN while retain is not available [MQTT-3.2.2-12, -13]."""
        if will.qos > self.maximum_qos:
            return (
                ReasonCode.QOS_NOT_SUPPORTED,
                f"will QoS {will.qos} is above the maximum of {self.maximum_qos}",
            )
        if will.retain and not self.retain_available:
            return ReasonCode.RETAIN_NOT_SUPPORTED, "a retained will: retain is not available"
        return None


# A `Peer5`'s unanswered ids and waiting re-sends while it has none: shared, so never
# written to (`_count` makes the connection its own set; `plan_resend` a new list).
NOTHING_UNANSWERED: Final[set[int]] = set()
NOTHING_WAITING: Final[list[int]] = []


class TopicAliases:
    """A connection's topic aliases both ways: the client's (alias -> topic name) and the
    server's (topic name -> alias). Made at the first alias set or chosen: many clients
    use none."""

    __slots__ = ("inbound", "outbound")

    def __init__(self) -> None:
        self.inbound: dict[int, str] = {}
        self.outbound: dict[bytes, int] = {}


@dataclass(slots=True, frozen=True)
class ClientLimits5:
    """The client's limits from its CONNECT (or a server's from its CONNACK, `server`):
    fixed for the connection, and the same for most clients of a fleet, so `Peer5`s share
    them (`client_limits`)."""

    receive_maximum: int = 65535
    maximum_packet_size: int = MAX_MQTT_PACKET
    topic_alias_maximum: int = 0
    session_expiry_interval: int = 0
    request_problem_information: bool = True
    auth_method: str | None = None  # CONNECT's Authentication Method
    # The peer is a server (a dialer's `Peer5`, from CONNACK): its PUBLISHes may carry
    # Subscription Identifiers, a client's may not [MQTT-3.3.4-6].
    server: bool = False


# Every distinct `ClientLimits5` in use, to share: a connection keeps a reference, not a
# copy (40 bytes less per MQTT 5.0 connection). Forgotten, not evicted one by one, when a
# flood of distinct limits fills it; connections keep theirs.
_SHARED_LIMITS: Final[dict[ClientLimits5, ClientLimits5]] = {}
_SHARED_LIMITS_KEPT: Final = 1024


def client_limits(limits: ClientLimits5) -> ClientLimits5:
    """The shared `ClientLimits5` equal to `limits`."""
    shared = _SHARED_LIMITS.get(limits)
    if shared is None:
        if len(_SHARED_LIMITS) >= _SHARED_LIMITS_KEPT:
            _SHARED_LIMITS.clear()
        shared = _SHARED_LIMITS[limits] = limits
    return shared


DEFAULT_LIMITS: Final = client_limits(ClientLimits5())


class Peer5:
    """The client's limits from its CONNECT (`limits`, shared), and the per-connection
    state they govern."""

    __slots__ = ("aliases", "limits", "reauthenticating", "unanswered", "waiting")

    def __init__(
        self,
        receive_maximum: int = 65535,
        maximum_packet_size: int = MAX_MQTT_PACKET,
        topic_alias_maximum: int = 0,
        session_expiry_interval: int = 0,
        request_problem_information: bool = True,
        auth_method: str | None = None,
        server: bool = False,
        limits: ClientLimits5 | None = None,
    ) -> None:
        if limits is None:
            limits = client_limits(
                ClientLimits5(
                    receive_maximum,
                    maximum_packet_size,
                    topic_alias_maximum,
                    session_expiry_interval,
                    request_problem_information,
                    auth_method,
                    server,
                )
            )
        self.limits = limits
        self.reauthenticating = False  # an AUTH 0x19 was received, its exchange is not over
        self.aliases: TopicAliases | None = None  # made at the first alias
        # The client's QoS 1/2 ids not answered yet (a set is 216 bytes even empty: the
        # shared empty until the first).
        self.unanswered: set[int] = NOTHING_UNANSWERED
        # Packet ids in flight not re-sent yet on this connection: beyond the client's
        # Receive Maximum when it resumed its session (`plan_resend`), sent as room frees.
        self.waiting: list[int] = NOTHING_WAITING

    @classmethod
    def from_connect(cls, props: Properties | None, server: bool = False) -> Peer5:
        """The limits a CONNECT states (a CONNACK's, for `server`), defaults for the rest."""
        if props is None:
            return cls(limits=DEFAULT_LIMITS if not server else None, server=server)
        return cls(
            receive_maximum=(65535 if props.receive_maximum is None else props.receive_maximum),
            maximum_packet_size=(
                MAX_MQTT_PACKET if props.maximum_packet_size is None else props.maximum_packet_size
            ),
            topic_alias_maximum=props.topic_alias_maximum or 0,
            session_expiry_interval=props.session_expiry_interval or 0,
            request_problem_information=props.request_problem_information != 0,
            auth_method=props.authentication_method,
            server=server,
        )

    @property
    def receive_maximum(self) -> int:
        return self.limits.receive_maximum

    @property
    def maximum_packet_size(self) -> int:
        return self.limits.maximum_packet_size

    @property
    def topic_alias_maximum(self) -> int:
        return self.limits.topic_alias_maximum

    @property
    def session_expiry_interval(self) -> int:
        return self.limits.session_expiry_interval

    @property
    def request_problem_information(self) -> bool:
        return self.limits.request_problem_information

    @property
    def auth_method(self) -> str | None:
        return self.limits.auth_method

    @property
    def server(self) -> bool:
        return self.limits.server

    def check_publish(self, publish: Publish, limits: ServerLimits5) -> tuple[ReasonCode, str]:
        """A PUBLISH from the client against the server's limits and this connection's
        state: (0, "") when it is fine, else the reason code and why.

        Its Topic Alias is applied (the mapping set, or the empty topic filled in) and
        taken off: it is this connection's only. A QoS 1/2 packet id is counted against
        the Receive Maximum until `answered`.
        """
        qos = publish.qos
        if qos > limits.maximum_qos:
            return (
                ReasonCode.QOS_NOT_SUPPORTED,
                f"QoS {qos} is above the maximum of {limits.maximum_qos}",
            )
        if publish.retain and not limits.retain_available:
            return ReasonCode.RETAIN_NOT_SUPPORTED, "retain is not available"
        props = publish.properties
        if props is None:
            return self._count(publish, limits) if qos else (_FINE, "")
        if props.subscription_identifiers and not self.server:
            return (
                ReasonCode.PROTOCOL_ERROR,
                "a PUBLISH from a client carries a subscription identifier [MQTT-3.3.4-6]",
            )
        alias = props.topic_alias
        if alias is not None:
            props.topic_alias = None
            if alias > limits.topic_alias_maximum:
                return (
                    ReasonCode.TOPIC_ALIAS_INVALID,
                    f"topic alias {alias} is above the maximum of {limits.topic_alias_maximum}",
                )
            aliases = self.aliases
            if publish.topic:
                if aliases is None:
                    aliases = self.aliases = TopicAliases()
                aliases.inbound[alias] = publish.topic
            else:
                topic = aliases.inbound.get(alias) if aliases is not None else None
                if topic is None:
                    return ReasonCode.PROTOCOL_ERROR, f"topic alias {alias} was never set"
                publish.topic = topic
        if qos:
            code, problem = self._count(publish, limits)
            if code:
                return code, problem
        if props.payload_format_indicator == 1:
            try:
                publish.payload.decode("utf-8")
            except UnicodeDecodeError:
                return (
                    ReasonCode.PAYLOAD_FORMAT_INVALID,
                    "the payload is not UTF-8, as its payload format indicator says",
                )
        return _FINE, ""

    def check_request(
        self, packet: Subscribe | Disconnect, limits: ServerLimits5
    ) -> tuple[ReasonCode, str]:
        """The 5.0 rules of a SUBSCRIBE or DISCONNECT that need this connection's state."""
        props = packet.properties
        if props is None:
            return _FINE, ""
        if isinstance(packet, Subscribe):
            if props.subscription_identifiers and not limits.subscription_identifier_available:
                return (
                    ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
                    "subscription identifiers are not available",
                )
        elif props.session_expiry_interval and not self.session_expiry_interval:
            return (
                ReasonCode.PROTOCOL_ERROR,
                "DISCONNECT sets a session expiry interval, but CONNECT's was 0",
            )
        return _FINE, ""

    def check_auth(self, packet: Auth, connected: bool) -> str:
        """Why an AUTH from the client breaks the rules of §4.12 ("" when it does not): it
        needs CONNECT's method, and 0x18 while an exchange is under way (the one CONNECT
        began, before CONNACK), else 0x19 to begin a re-authentication."""
        method = self.auth_method
        if method is None:
            return "AUTH, but CONNECT had no authentication method"
        given = packet.properties.authentication_method if packet.properties else None
        if given != method:
            return f"AUTH with authentication method {given!r}, not CONNECT's {method!r}"
        expected = 0x19 if connected and not self.reauthenticating else 0x18
        if packet.reason_code != expected:
            return f"AUTH with reason 0x{packet.reason_code:02X} where 0x{expected:02X} belongs"
        return ""

    def _count(self, publish: Publish, limits: ServerLimits5) -> tuple[ReasonCode, str]:
        unanswered = self.unanswered
        packet_id = publish.packet_id
        if packet_id not in unanswered:  # else a QoS 2 re-send, counted already
            if len(unanswered) >= limits.receive_maximum:
                return (
                    ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                    f"more than {limits.receive_maximum} QoS 1/2 PUBLISHes unanswered",
                )
            if unanswered is NOTHING_UNANSWERED:
                unanswered = self.unanswered = set()
            unanswered.add(packet_id)
        return _FINE, ""

    def fits(self, topic: bytes, payload: bytes, qos: int, properties: bytes) -> bool:
        """True when a PUBLISH fits the client's Maximum Packet Size, with the Topic Alias
        property it may get (3 bytes, when the client allows aliases)."""
        props = len(properties) + (3 if self.topic_alias_maximum else 0)
        body = 2 + len(topic) + (2 if qos else 0) + _varint_size(props) + props + len(payload)
        return 1 + _varint_size(body) + body <= self.maximum_packet_size

    # -- what the server writes ---------------------------------------------

    def connack(
        self,
        limits: ServerLimits5,
        session_present: bool,
        keepalive: int,
        assigned_client_id: str | None,
        session_expiry_interval: int | None,
        authentication_data: bytes | None = None,
    ) -> bytes:
        """CONNACK 0: the server's limits, and what it decided for this client; after
        enhanced authentication, its method and the server's last data."""
        props = limits.connack_properties()
        props.assigned_client_identifier = assigned_client_id
        props.session_expiry_interval = session_expiry_interval
        props.authentication_method = self.auth_method
        props.authentication_data = authentication_data
        if limits.server_keep_alive and keepalive == limits.server_keep_alive:
            props.server_keep_alive = keepalive
        return encode(ConnAck(0, session_present, props), _MQTT_5)

    def auth(self, code: int, data: bytes | None) -> bytes:
        """AUTH from the server: 0x18 for a step of an exchange, 0x00 at the end of a
        re-authentication; with CONNECT's method [MQTT-4.12.0-5]."""
        if code == 0:
            self.reauthenticating = False
        props = Properties(authentication_method=self.auth_method, authentication_data=data)
        return encode(Auth(code, props), _MQTT_5)

    def refusal(self, code: int, reason: str) -> bytes:
        """A refusing CONNACK, with the reason as Reason String when it fits the client's
        Maximum Packet Size (the property is optional, the limit is not); 0x80 for a code
        CONNACK cannot carry. Nothing (b"") when not even the bare CONNACK fits: the
        connection then closes without one [MQTT-3.1.2-24]."""
        code = code if code in CONNACK_REASONS else ReasonCode.UNSPECIFIED_ERROR
        props = Properties(reason_string=reason[:MAX_REASON_STRING])
        data = encode(ConnAck(code, False, props), _MQTT_5)
        if len(data) > self.maximum_packet_size:
            data = encode(ConnAck(code, False), _MQTT_5)
            if len(data) > self.maximum_packet_size:
                return b""
        return data

    def disconnect(self, code: int, reason: str) -> bytes:
        """DISCONNECT from the server, before it closes (0x80 for a code DISCONNECT cannot
        carry), with the reason as Reason String when it fits."""
        sent = code if code in DISCONNECT_REASONS else ReasonCode.UNSPECIFIED_ERROR
        data = encode(Disconnect(sent, Properties(reason_string=reason[:MAX_REASON_STRING])), 5)
        if len(data) > self.maximum_packet_size:
            data = encode(Disconnect(sent), _MQTT_5)
        return data

    def acknowledgement(self, packet_type: PacketType, packet_id: int, reason_code: int) -> bytes:
        """PUBACK, PUBREC, PUBREL or PUBCOMP with a reason code; the end of the client's
        exchange (PUBACK, PUBCOMP, an error) frees its place in the Receive Maximum."""
        if (
            packet_type is PacketType.PUBACK
            or packet_type is PacketType.PUBCOMP
            or reason_code >= 0x80
        ):
            self.unanswered.discard(packet_id)
        if not reason_code:
            return encode_ack(packet_type, packet_id)
        first = packet_type << 4 | (0x02 if packet_type is PacketType.PUBREL else 0)
        return bytes((first, 3, packet_id >> 8, packet_id & 0xFF, reason_code))

    def plan_resend(self, flows: Flows) -> tuple[list[Inflight], list[int], list[object]]:
        """What a resumed session re-sends, in order: no more unanswered PUBLISHes than the
        client's Receive Maximum (the packet ids of the others wait for room), and none
        larger than its Maximum Packet Size (taken out of `flows`; their refs returned)."""
        resend: list[Inflight] = []
        waiting: list[int] = []
        dropped: list[object] = []
        outbound = flows.outbound
        for inflight in list(outbound.values()):
            if inflight.state is InflightState.PUBLISHED:
                topic, payload = inflight.topic, inflight.payload
                if not self.fits(topic, payload, inflight.qos, inflight.properties):
                    del outbound[inflight.packet_id]
                    dropped.append(inflight.ref)
                    continue
                if len(resend) >= self.receive_maximum:
                    waiting.append(inflight.packet_id)
                    continue
            resend.append(inflight)
        return resend, waiting, dropped

    def encode_publish(self, inflight: Inflight, dup: bool) -> bytes:
        """A PUBLISH to the client, with a topic alias when it allows them (never on a
        re-send, which must stand on its own)."""
        topic = inflight.topic
        properties = inflight.properties
        if self.topic_alias_maximum and not dup:
            known, alias = self.outbound_alias(topic)
            if alias:
                properties += alias_property(alias)
                if known:
                    topic = b""
        return encode_publish5(
            topic,
            inflight.payload,
            inflight.qos,
            inflight.retain,
            dup,
            inflight.packet_id,
            property_block(properties),
        )

    def outbound_alias(self, topic: bytes) -> tuple[bool, int]:
        """(known, alias) for a PUBLISH to the client: a known alias replaces the topic name,
        a new one goes with it; alias 0 when the client's maximum is used up (or zero)."""
        aliases = self.aliases
        if aliases is None:
            if not self.topic_alias_maximum:
                return False, 0
            aliases = self.aliases = TopicAliases()
        outbound = aliases.outbound
        alias = outbound.get(topic)
        if alias is not None:
            return True, alias
        if len(outbound) >= self.topic_alias_maximum:
            return False, 0
        alias = outbound[topic] = len(outbound) + 1
        return False, alias


def _varint_size(value: int) -> int:
    """Bytes of a Variable Byte Integer (§1.5.5)."""
    return 1 if value < 128 else 2 if value < 16384 else 3 if value < 2097152 else 4


def property_block(content: bytes) -> bytes:
    """A property block from properties already encoded one after the other."""
    size = len(content)
    if size < 128:
        return bytes((size,)) + content
    return encode_remaining_length(size) + content


def alias_property(alias: int) -> bytes:
    """A Topic Alias property (identifier 0x23, Two Byte Integer)."""
    return bytes((0x23, alias >> 8, alias & 0xFF))
