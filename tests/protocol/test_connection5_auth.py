"""Enhanced authentication (MQTT 5.0 §4.12) in the server-side `Connection`: the AUTH
exchange between CONNECT and CONNACK, re-authentication once connected, and every AUTH
that breaks the rules, driven by plain calls as in test_connection5.py."""

from __future__ import annotations

import pytest

from telemq.protocol import (
    Auth,
    AuthRequested,
    ConnAck,
    Connect,
    Connection,
    ConnectionClosed,
    ConnectionState,
    ConnectRequested,
    ConnectReturnCode,
    Decoder,
    Disconnect,
    DisconnectRequested,
    Flows,
    MessageReceived,
    Packet,
    Properties,
    Publish,
    ReasonCode,
    encode,
)
from telemq.protocol.codec5 import encode_connect5
from telemq.protocol.peer5 import ServerLimits5

METHOD = "TEST-METHOD"
LIMITS = ServerLimits5()


def auth(code: int = 0x18, data: bytes | None = b"d", method: str | None = METHOD) -> bytes:
    return encode(Auth(code, Properties(authentication_method=method, authentication_data=data)), 5)


def written(connection: Connection) -> list[Packet]:
    decoder = Decoder(protocol_level=5, mqtt5=True)
    packets = decoder.feed(connection.data_to_send())
    assert decoder.buffered == 0
    return packets


def state_of(connection: Connection) -> ConnectionState:
    return connection.state


def opened(method: str | None = METHOD, data: bytes | None = b"first") -> Connection:
    """A level-5 connection whose CONNECT (with an Authentication Method) awaits its answer."""
    connection = Connection(now=0.0, mqtt5=LIMITS, connect_timeout=10.0)
    props = Properties(authentication_method=method, authentication_data=data)
    packet = Connect("c", protocol_level=5, properties=props)
    assert connection.receive_data(encode_connect5(packet), 0.0) == [ConnectRequested(packet)]
    return connection


def challenged(now: float = 1.0) -> Connection:
    """The server answered the CONNECT with AUTH 0x18; it waits for the client's AUTH."""
    connection = opened()
    connection.continue_authentication(b"challenge", now)
    assert written(connection) == [
        Auth(0x18, Properties(authentication_method=METHOD, authentication_data=b"challenge"))
    ]
    assert state_of(connection) is ConnectionState.AUTHENTICATING
    return connection


def connected() -> Connection:
    connection = opened()
    connection.accept(False, Flows(), 0.0, authentication_data=b"last")
    (connack,) = written(connection)
    assert isinstance(connack, ConnAck) and connack.return_code == 0
    assert connack.properties is not None
    assert connack.properties.authentication_method == METHOD
    assert connack.properties.authentication_data == b"last"
    return connection


def refused_with(connection: Connection, code: ReasonCode) -> str:
    """The connection ended before CONNACK with a refusing CONNACK of `code`."""
    (connack,) = written(connection)
    assert isinstance(connack, ConnAck) and connack.return_code == code
    assert connack.properties is not None and connack.properties.reason_string
    assert connection.closed
    return connack.properties.reason_string


def test_the_clients_auth_is_reported_and_what_follows_waits() -> None:
    connection = challenged()
    publish = encode(Publish("t", b"x"), 5)
    events = connection.receive_data(auth(data=b"answer") + publish, 2.0)
    assert events == [AuthRequested(b"answer", False)]
    assert state_of(connection) is ConnectionState.CONNECTING
    assert connection.has_buffered_input  # the PUBLISH (a protocol error, once decoded)
    connection.continue_authentication(b"again", 3.0)
    assert connection.receive_data(b"", 3.0)[0] == ConnectionClosed(
        "a packet other than AUTH or DISCONNECT during authentication",
        False,
        ReasonCode.PROTOCOL_ERROR,
    )


def test_accept_after_the_exchange_sends_connack_with_the_method_and_reads_on() -> None:
    connection = challenged()
    assert connection.receive_data(auth(data=b"answer"), 2.0) == [AuthRequested(b"answer")]
    connection.accept(True, Flows(), 2.0, authentication_data=b"server-final")
    (connack,) = written(connection)
    assert isinstance(connack, ConnAck) and connack.session_present
    assert connack.properties is not None
    assert connack.properties.authentication_method == METHOD
    assert connack.properties.authentication_data == b"server-final"
    assert connection.receive_data(encode(Publish("t", b"x"), 5), 3.0) == [
        MessageReceived(Publish("t", b"x", properties=None))
    ]


def test_refuse_during_the_exchange_sends_connack_with_the_code() -> None:
    connection = challenged()
    connection.receive_data(auth(), 2.0)
    connection.refuse(
        ConnectReturnCode.NOT_AUTHORIZED, "wrong proof", ReasonCode.BAD_USER_NAME_OR_PASSWORD
    )
    assert refused_with(connection, ReasonCode.BAD_USER_NAME_OR_PASSWORD) == "wrong proof"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (encode(Publish("t", b"x"), 5), "other than AUTH or DISCONNECT"),
        (auth(code=0x19), "reason 0x19 where 0x18 belongs"),
        (auth(code=0x00, data=None), "reason 0x00 where 0x18 belongs"),
        (auth(method="OTHER"), "method 'OTHER', not CONNECT's 'TEST-METHOD'"),
        (auth(method=None), "method None"),
        (encode(Connect("c", protocol_level=5), 5), "other than AUTH or DISCONNECT"),
    ],
)
def test_a_bad_packet_during_the_exchange_gets_connack_0x82(data: bytes, problem: str) -> None:
    connection = challenged()
    (closed,) = connection.receive_data(data, 2.0)
    assert isinstance(closed, ConnectionClosed) and closed.code is ReasonCode.PROTOCOL_ERROR
    assert problem in refused_with(connection, ReasonCode.PROTOCOL_ERROR)


def test_disconnect_during_the_exchange_ends_it_gracefully() -> None:
    connection = challenged()
    events = connection.receive_data(encode(Disconnect(), 5), 2.0)
    assert events == [
        DisconnectRequested(0, None),
        ConnectionClosed("client sent DISCONNECT", True, ReasonCode.NORMAL_DISCONNECTION),
    ]
    assert connection.data_to_send() == b""


def test_the_client_has_the_connect_timeout_to_answer() -> None:
    connection = challenged(now=5.0)
    assert connection.next_timer() == 15.0
    assert connection.handle_timer(14.9) == []
    (closed,) = connection.handle_timer(15.0)
    assert isinstance(closed, ConnectionClosed)
    assert closed.reason == "no AUTH within the connect timeout"
    # CONNACK cannot carry 0x8D (keep-alive timeout): the client reads 0x80.
    refused_with(connection, ReasonCode.UNSPECIFIED_ERROR)


def test_while_the_owner_decides_only_the_keepalive_runs() -> None:
    connection = challenged()
    connection.receive_data(auth(), 2.0)
    assert connection.next_timer() == 2.0 + 1.5 * 60


def test_reauthentication_once_connected() -> None:
    connection = connected()
    assert connection.receive_data(auth(0x19, b"again"), 1.0) == [AuthRequested(b"again", True)]
    connection.continue_authentication(b"challenge", 1.0)
    assert state_of(connection) is ConnectionState.CONNECTED  # other flows go on meanwhile
    events = connection.receive_data(encode(Publish("t", b"x"), 5) + auth(0x18, b"proof"), 2.0)
    assert events[1:] == [AuthRequested(b"proof", False)]
    connection.reauthenticated(b"done")
    assert written(connection) == [
        Auth(0x18, Properties(authentication_method=METHOD, authentication_data=b"challenge")),
        Auth(0x00, Properties(authentication_method=METHOD, authentication_data=b"done")),
    ]
    # Over: the next one starts with 0x19 again.
    assert connection.receive_data(auth(0x19), 3.0) == [AuthRequested(b"d", True)]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (auth(0x18), "reason 0x18 where 0x19 belongs"),
        (auth(0x19, method="OTHER"), "not CONNECT's"),
    ],
)
def test_a_bad_auth_once_connected_gets_disconnect_0x82(data: bytes, problem: str) -> None:
    connection = connected()
    (closed,) = connection.receive_data(data, 1.0)
    assert isinstance(closed, ConnectionClosed) and problem in closed.reason
    (disconnect,) = written(connection)
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x82


def test_a_second_0x19_during_a_reauthentication_gets_disconnect_0x82() -> None:
    connection = connected()
    connection.receive_data(auth(0x19), 1.0)
    (closed,) = connection.receive_data(auth(0x19), 1.0)
    assert isinstance(closed, ConnectionClosed) and "0x19 where 0x18" in closed.reason


def test_auth_without_a_method_in_connect_gets_disconnect_0x82() -> None:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    connection.receive_data(encode_connect5(Connect("c", protocol_level=5)), 0.0)
    connection.accept(False, Flows(), 0.0)
    connection.data_to_send()
    (closed,) = connection.receive_data(auth(0x19), 1.0)
    assert isinstance(closed, ConnectionClosed)
    assert closed.reason == "AUTH, but CONNECT had no authentication method"


def test_continue_authentication_needs_a_method_in_connect() -> None:
    connection = Connection(now=0.0, mqtt5=LIMITS)
    connection.receive_data(encode_connect5(Connect("c", protocol_level=5)), 0.0)
    with pytest.raises(Exception, match="without a method"):
        connection.continue_authentication(b"x", 0.0)


def test_an_auth_in_the_same_read_as_connect_waits_for_the_answer() -> None:
    """A client may not send AUTH before the server's; if it does, it is not read early."""
    connection = Connection(now=0.0, mqtt5=LIMITS)
    props = Properties(authentication_method=METHOD, authentication_data=b"first")
    packet = Connect("c", protocol_level=5, properties=props)
    assert connection.receive_data(encode_connect5(packet) + auth(), 0.0) == [
        ConnectRequested(packet)
    ]
    connection.continue_authentication(b"challenge", 0.0)
    assert connection.receive_data(b"", 0.0) == [AuthRequested(b"d")]
