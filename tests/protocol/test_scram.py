"""SCRAM-SHA-256 (protocol/scram.py) against RFC 7677's example, and its refusals."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemq.protocol.scram import (
    Credentials,
    ScramClient,
    ScramError,
    ScramServer,
    salted_password,
)

# RFC 7677 §3: user "user", password "pencil".
CLIENT_NONCE = b"rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = b"%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

PENCIL: Credentials = (4096, SALT, salted_password(b"pencil", SALT, 4096))


def server(users: dict[str, Credentials] | None = None, nonce: bytes = SERVER_NONCE) -> ScramServer:
    known = {"user": PENCIL} if users is None else users
    return ScramServer(known.get, b"secret", 4096, nonce=nonce)


def test_the_server_side_of_rfc_7677s_example() -> None:
    exchange = server()
    assert exchange.first(CLIENT_FIRST) == SERVER_FIRST
    assert exchange.user == "user"
    assert exchange.final(CLIENT_FINAL) == SERVER_FINAL


def test_the_client_side_of_rfc_7677s_example() -> None:
    client = ScramClient("user", "pencil", nonce=CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)


def test_a_wrong_password_fails_at_the_proof() -> None:
    exchange = server()
    client = ScramClient("user", "pencils")
    reply = exchange.first(client.first())
    with pytest.raises(ScramError, match="authentication of 'user' failed"):
        exchange.final(client.final(reply))


def test_an_unknown_user_looks_like_a_known_one_until_the_proof() -> None:
    exchange = server()
    client = ScramClient("nobody", "pencil")
    reply = exchange.first(client.first())
    attributes = dict(part.split(b"=", 1) for part in reply.split(b","))
    assert attributes[b"i"] == b"4096" and len(base64.b64decode(attributes[b"s"])) == 16
    # The same name always gets the same made-up salt: asking twice reveals nothing.
    assert server().first(ScramClient("nobody", "x").first()).split(b",")[1] == reply.split(b",")[1]
    with pytest.raises(ScramError, match="failed"):
        exchange.final(client.final(reply))


def test_a_forged_server_signature_is_refused_by_the_client() -> None:
    client = ScramClient("user", "pencil", nonce=CLIENT_NONCE)
    client.final(SERVER_FIRST)
    with pytest.raises(ScramError, match="does not verify"):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 32))
    with pytest.raises(ScramError, match="refused: invalid-proof"):
        client.verify(b"e=invalid-proof")


@pytest.mark.parametrize(
    ("client_first", "problem"),
    [
        (None, "no client-first"),
        (b"", "no client-first"),
        (b"p=tls-unique,,n=user,r=abc", "channel binding is not supported"),
        (b"x,,n=user,r=abc", "bad channel binding flag"),
        (b"n,,r=abc,n=user", "expected attribute 'n'"),
        (b"n,,n=user", "fewer than 2 attributes"),
        (b"n,,n=user,r=", "empty client nonce"),
        (b"n,,n=,r=abc", "empty user name"),
        (b"n,,n=us=er,r=abc", "bad '=' escape"),
        (b"n,a=other,n=user,r=abc", "authorization identity"),
        (b"n,,m=ext,n=user,r=abc", "expected attribute 'n'"),
        (b"n,,n=user,r=abc,m=must", "mandatory extension"),
        (b"n,,n=\xff,r=abc", "not UTF-8"),
        (b"n,,n=user,r=" + b"a" * 5000, "longer than 4096 bytes"),
    ],
)
def test_bad_client_first_messages(client_first: bytes | None, problem: str) -> None:
    with pytest.raises(ScramError, match=problem):
        server().first(client_first)


@pytest.mark.parametrize(
    ("client_final", "problem"),
    [
        (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", "no proof"),
        (b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AA==", "binding"),
        (b"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=AA==", "nonce does not match"),
        (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!", "not base64"),
        (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AA==", "failed"),
    ],
)
def test_bad_client_final_messages(client_final: bytes, problem: str) -> None:
    exchange = server()
    exchange.first(CLIENT_FIRST)
    with pytest.raises(ScramError, match=problem):
        exchange.final(client_final)


def test_messages_out_of_turn() -> None:
    exchange = server()
    with pytest.raises(ScramError, match="out of turn"):
        exchange.final(CLIENT_FINAL)
    exchange.first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="second client-first"):
        exchange.first(CLIENT_FIRST)
    exchange.final(CLIENT_FINAL)
    with pytest.raises(ScramError, match="out of turn"):
        exchange.final(CLIENT_FINAL)  # a proof is good once


@settings(max_examples=40, deadline=None)
@given(
    user=st.text(min_size=1, max_size=20).filter(lambda s: "\x00" not in s),
    password=st.binary(max_size=30),
)
def test_any_user_and_password_round_trip(user: str, password: bytes) -> None:
    """Names with ',' and '=' are escaped; any password bytes work."""
    exchange = server({user: (2, b"saltsalt", salted_password(password, b"saltsalt", 2))})
    client = ScramClient(user, password)
    reply = exchange.first(client.first())
    assert exchange.user == user
    client.verify(exchange.final(client.final(reply)))
