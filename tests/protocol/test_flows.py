"""`Flows`: packet identifiers, the outbound in-flight table and the incoming QoS 2 guard."""

from __future__ import annotations

import pytest

from telemq.protocol import (
    Flows,
    Inflight,
    InflightState,
    LocalProtocolError,
    PacketIdsExhausted,
)

MAX_ID = 65535


def track(flows: Flows, qos: int = 1, ref: object = None, packet_id: int = 0) -> Inflight:
    return flows.track(qos, b"t", b"payload", False, ref, 0.0, packet_id=packet_id)


def test_ids_start_at_one_and_increase() -> None:
    flows = Flows()
    assert [track(flows).packet_id for _ in range(5)] == [1, 2, 3, 4, 5]


def test_allocation_continues_after_the_last_id_even_when_lower_ones_are_free() -> None:
    flows = Flows()
    for _ in range(3):
        track(flows)
    assert flows.acknowledge(2) is not None
    assert track(flows).packet_id == 4


def test_ids_wrap_around_to_one_never_zero() -> None:
    flows = Flows()
    seen = []
    for _ in range(MAX_ID + 3):
        packet_id = flows.allocate_packet_id()
        seen.append(packet_id)
    assert seen[:2] == [1, 2]
    assert seen[MAX_ID - 1 : MAX_ID + 3] == [MAX_ID, 1, 2, 3]
    assert 0 not in seen


def test_wrap_around_skips_ids_in_use() -> None:
    flows = Flows()
    for _ in range(5):
        track(flows)  # 1..5 in flight
    assert flows.acknowledge(2) is not None
    assert flows.acknowledge(4) is not None
    # Move the allocator to the top of the range without keeping those ids in flight.
    for _ in range(6, MAX_ID + 1):
        flows.allocate_packet_id()
    assert [track(flows).packet_id for _ in range(3)] == [2, 4, 6]
    assert sorted(flows.outbound) == [1, 2, 3, 4, 5, 6]


def test_exhaustion_with_65535_messages_in_flight() -> None:
    flows = Flows(max_inflight=0)  # 0: no limit other than the id space
    assert flows.max_inflight == MAX_ID
    ids = [track(flows, qos=1 + index % 2).packet_id for index in range(MAX_ID)]
    assert sorted(ids) == list(range(1, MAX_ID + 1))
    assert not flows.has_window()
    with pytest.raises(PacketIdsExhausted, match="all 65,535 packet identifiers are in use"):
        flows.allocate_packet_id()
    with pytest.raises(PacketIdsExhausted):
        track(flows)
    assert issubclass(PacketIdsExhausted, LocalProtocolError)
    # Completing one flow frees exactly that id.
    assert flows.acknowledge(1001) is not None  # odd ids were tracked as QoS 1
    assert flows.allocate_packet_id() == 1001


def test_has_window_respects_max_inflight() -> None:
    flows = Flows(max_inflight=2)
    assert flows.has_window()
    first = track(flows, qos=1)
    assert flows.has_window()
    second = track(flows, qos=2)
    assert not flows.has_window()
    assert flows.acknowledge(first.packet_id) is first
    assert flows.has_window()
    track(flows)
    assert not flows.has_window()
    assert flows.received(second.packet_id, 1.0) is second
    assert not flows.has_window()  # a released QoS 2 message is still in flight
    assert flows.complete(second.packet_id) is second
    assert flows.has_window()


def test_negative_max_inflight_means_no_limit() -> None:
    assert Flows(max_inflight=-1).max_inflight == MAX_ID


def test_track_records_what_is_needed_to_resend() -> None:
    flows = Flows()
    inflight = flows.track(2, b"a/b", b"x", True, "ref", 12.5)
    assert inflight == Inflight(1, 2, b"a/b", b"x", True, "ref", InflightState.PUBLISHED, 12.5)
    assert flows.outbound == {1: inflight}


@pytest.mark.parametrize("qos", [0, 3])
def test_only_qos_1_and_2_are_tracked(qos: int) -> None:
    with pytest.raises(LocalProtocolError, match=f"not QoS {qos}"):
        track(Flows(), qos=qos)


def test_track_with_a_given_id_restores_a_flow() -> None:
    flows = Flows()
    restored = flows.track(2, b"t", b"", False, "r", 0.0, 40, InflightState.RELEASED)
    assert restored.packet_id == 40
    assert restored.state is InflightState.RELEASED
    assert track(flows).packet_id == 1


@pytest.mark.parametrize("packet_id", [-1, MAX_ID + 1, 7])
def test_track_refuses_invalid_or_used_ids(packet_id: int) -> None:
    flows = Flows()
    track(flows, packet_id=7)
    with pytest.raises(LocalProtocolError, match=f"packet id {packet_id} is invalid or already"):
        track(flows, packet_id=packet_id)


def test_outbound_keeps_the_order_of_first_sending() -> None:
    flows = Flows()
    first = track(flows, qos=2)
    second = track(flows, qos=1)
    third = track(flows, qos=2)
    flows.received(first.packet_id, 5.0)
    assert list(flows.outbound.values()) == [first, second, third]


def test_puback_completes_qos_1_only() -> None:
    flows = Flows()
    qos1 = track(flows, qos=1)
    qos2 = track(flows, qos=2)
    assert flows.acknowledge(qos2.packet_id) is None
    assert flows.acknowledge(999) is None
    assert flows.acknowledge(qos1.packet_id) is qos1
    assert flows.acknowledge(qos1.packet_id) is None
    assert list(flows.outbound) == [qos2.packet_id]


def test_pubrec_then_pubcomp_complete_qos_2() -> None:
    flows = Flows()
    qos1 = track(flows, qos=1)
    qos2 = track(flows, qos=2)
    assert flows.received(qos1.packet_id, 1.0) is None
    assert flows.received(999, 1.0) is None
    assert flows.complete(qos2.packet_id) is None  # PUBCOMP before PUBREC
    assert qos2.state is InflightState.PUBLISHED
    assert flows.received(qos2.packet_id, 3.0) is qos2
    assert qos2.state is InflightState.RELEASED
    assert qos2.sent_at == 3.0
    assert flows.complete(qos2.packet_id) is qos2
    assert flows.complete(qos2.packet_id) is None
    assert list(flows.outbound) == [qos1.packet_id]


def test_incoming_qos_2_guard() -> None:
    flows = Flows()
    assert not flows.is_held(5)
    flows.hold_incoming(5, "message 5")
    assert flows.is_held(5)
    assert flows.release_incoming(5) == "message 5"
    assert not flows.is_held(5)
    assert flows.release_incoming(5) is None


def test_directions_have_separate_ids() -> None:
    flows = Flows()
    flows.hold_incoming(1, "incoming 1")
    assert track(flows).packet_id == 1
    assert flows.is_held(1)
