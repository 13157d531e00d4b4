"""A `Peer5`'s fixed limits are one `ClientLimits5` shared by every connection that states
the same ones, while the state they govern (aliases, unanswered ids, re-authentication)
stays each connection's own."""

from __future__ import annotations

from telemq.protocol.peer5 import (
    _SHARED_LIMITS,
    _SHARED_LIMITS_KEPT,
    DEFAULT_LIMITS,
    ClientLimits5,
    Peer5,
    client_limits,
)
from telemq.protocol.property_table import Properties


def test_connections_stating_the_same_limits_share_them_and_nothing_else() -> None:
    stated = Properties(receive_maximum=20, maximum_packet_size=4096, topic_alias_maximum=5)
    first = Peer5.from_connect(stated)
    second = Peer5.from_connect(
        Properties(receive_maximum=20, maximum_packet_size=4096, topic_alias_maximum=5)
    )
    other = Peer5.from_connect(Properties(receive_maximum=21))
    assert first.limits is second.limits
    assert other.limits is not first.limits
    assert (first.receive_maximum, first.maximum_packet_size, first.topic_alias_maximum) == (
        20,
        4096,
        5,
    )
    assert first.aliases is None and first.unanswered is second.unanswered  # none yet
    first.reauthenticating = True
    assert not second.reauthenticating


def test_a_connect_without_properties_has_the_defaults() -> None:
    peer = Peer5.from_connect(None)
    assert peer.limits is DEFAULT_LIMITS
    assert (peer.receive_maximum, peer.topic_alias_maximum, peer.session_expiry_interval) == (
        65535,
        0,
        0,
    )
    assert peer.request_problem_information and peer.auth_method is None and not peer.server
    assert Peer5.from_connect(None, server=True).server


def test_what_a_connect_says_is_read_as_it_says() -> None:
    peer = Peer5.from_connect(
        Properties(
            session_expiry_interval=60,
            request_problem_information=0,
            authentication_method="SCRAM-SHA-256",
        )
    )
    assert peer.session_expiry_interval == 60
    assert not peer.request_problem_information
    assert peer.auth_method == "SCRAM-SHA-256"


def test_the_shared_limits_are_bounded() -> None:
    for n in range(_SHARED_LIMITS_KEPT + 10):
        client_limits(ClientLimits5(receive_maximum=1 + n))
    assert len(_SHARED_LIMITS) <= _SHARED_LIMITS_KEPT
    kept = Peer5(receive_maximum=7)
    assert kept.receive_maximum == 7  # a connection keeps its limits whatever is forgotten
