"""The packets and events made per message or per connection write their `__init__` out.

The `__init__` that `dataclasses` generates is Python source it compiles at import (its code
says it comes from "<string>"), so under mypyc it stays interpreted: a Python call per
object, 0.15 to 0.3 us, five of them per QoS 2 message before this was done. A written one
is compiled with its module. These classes are still dataclasses (equality, repr), and take
the same arguments, by position or by name, with the same defaults.
"""

from __future__ import annotations

import dataclasses

import pytest

from telemq.protocol.events import (
    ConnectionClosed,
    ConnectRequested,
    DeliveryAcknowledged,
    DeliveryReceived,
    DisconnectRequested,
    MessageReceived,
    MessageReleased,
)
from telemq.protocol.flows import Inflight, InflightState
from telemq.protocol.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
)
from telemq.protocol.reasons import ReasonCode

PER_MESSAGE_OR_CONNECTION = [
    Publish,
    PubAck,
    PubRec,
    PubRel,
    PubComp,
    ConnAck,
    Disconnect,
    PingReq,
    PingResp,
    Connect,
    ConnectRequested,
    MessageReceived,
    MessageReleased,
    DeliveryAcknowledged,
    DeliveryReceived,
    DisconnectRequested,
    ConnectionClosed,
    Inflight,
]


@pytest.mark.parametrize("cls", PER_MESSAGE_OR_CONNECTION, ids=lambda cls: cls.__name__)
def test_the_init_is_written_out_not_generated(cls: type) -> None:
    assert dataclasses.is_dataclass(cls)
    code = getattr(cls.__init__, "__code__", None)  # None: compiled
    assert code is None or code.co_filename != "<string>", f"{cls.__name__}: generated"


def test_they_take_their_fields_by_position_or_name_with_the_defaults() -> None:
    publish = Publish("t", b"x", 1, packet_id=3)
    assert MessageReceived(publish) == MessageReceived(publish=publish, duplicate=False)
    assert MessageReleased(4, None) == MessageReleased(packet_id=4, message=None)
    assert DeliveryAcknowledged(5, publish).ref is publish
    assert DeliveryReceived(ref=publish, packet_id=6).packet_id == 6
    assert DisconnectRequested() == DisconnectRequested(0, None)
    assert not DisconnectRequested().keeps_will and DisconnectRequested(4).keeps_will
    closed = ConnectionClosed("gone")
    assert (closed.graceful, closed.code) == (False, ReasonCode.UNSPECIFIED_ERROR)
    assert ConnectionClosed("bye", graceful=True, code=ReasonCode.NORMAL_DISCONNECTION).graceful
    assert ConnectRequested(Connect("c")).packet.client_id == "c"
    assert ConnAck() == ConnAck(0, False, None)
    assert Connect("c") == Connect(
        "c", 4, True, 60, None, None, None, "MQTT", properties=None, bridge=False
    )
    assert ConnAck(session_present=True).session_present
    assert Disconnect() == Disconnect(reason_code=0, properties=None)
    assert PingReq() == PingReq() and PingResp() == PingResp()
    inflight = Inflight(7, 2, b"t", b"p", False, publish)
    assert (inflight.state, inflight.sent_at, inflight.properties) == (
        InflightState.PUBLISHED,
        0.0,
        b"",
    )
    assert inflight == Inflight(7, 2, b"t", b"p", False, publish, InflightState.PUBLISHED, 0.0)
    assert "packet_id=7" in repr(inflight)


def test_a_connect_copy_is_equal_and_apart() -> None:
    """The dialer changes a copy of the CONNECT it was given, never the caller's."""
    original = Connect("c", 5, False, 30, username="u", password=b"p", bridge=True)
    copy = original.copy()
    assert copy == original and copy is not original
    copy.protocol_name = "MQIsdp"
    assert original.protocol_name == "MQTT"
