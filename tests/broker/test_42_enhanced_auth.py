"""MQTT 5.0 enhanced authentication (issue: AUTH through the hooks, SCRAM-SHA-256).

In process, a hook with its own method shows the seam: a challenge and its answer, the user
the exchange proves, failures, a step that raises, and re-authentication. Against a running
broker with [[users]], SCRAM-SHA-256 over raw sockets: the client checks the server's
signature in CONNACK, wrong passwords and unknown users get 0x86, a broker without the
method (no users, or `scram_sha_256 = false`) answers 0x8C, and the proven user's ACL
applies. MQTT.js runs the same SCRAM exchange from Node in test_40_mqttjs.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from telemq.broker import BrokerConfig
from telemq.broker.edges.listeners import MemoryConnection, MemoryListener
from telemq.broker.security.hooks import AuthExchange, AuthOutcome, AuthStep, Hook
from telemq.broker.server import Broker
from telemq.protocol import (
    Auth,
    ConnAck,
    Connect,
    Decoder,
    Disconnect,
    Packet,
    Properties,
    PubAck,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    encode,
)
from telemq.protocol.scram import METHOD as SCRAM
from telemq.protocol.scram import ScramClient, ScramError
from telemq.store import MemoryStore
from testsupport.process import users_and_acl
from testsupport.raw5 import Raw5Factory

from .helpers import BrokerProcess, write_config

BrokerFactory = Callable[..., BrokerProcess]
V5 = 5
TOKEN = "TOKEN-HMAC"  # the test hook's method
TOKENS = {"alice": b"alice-token", "bob": b"bob-token"}


def auth_props(method: str, data: bytes | None) -> Properties:
    return Properties(authentication_method=method, authentication_data=data)


# ---------------------------------------------------------------------------------------------
# The seam, in process


class TokenExchange(AuthExchange):
    """Client: CONNECT data = user name. Server: AUTH 0x18 with a nonce. Client: AUTH 0x18
    with HMAC(token, nonce). Server: success with b"welcome <user>"."""

    def __init__(self) -> None:
        self.user: str | None = None
        self.nonce = b"n0nce"

    def step(self, data: bytes | None) -> AuthStep:
        if self.user is None:
            if data == b"explode":
                raise RuntimeError("the token service is down")
            self.user = (data or b"").decode()
            return AuthStep(AuthOutcome.CONTINUE, self.nonce)
        token = TOKENS.get(self.user)
        if token is not None and data == hmac.new(token, self.nonce, hashlib.sha256).digest():
            return AuthStep(AuthOutcome.SUCCESS, b"welcome " + self.user.encode(), self.user)
        return AuthStep(AuthOutcome.FAILURE, reason=f"bad token for {self.user!r}")


class TokenHook(Hook):
    def __init__(self) -> None:
        self.started: list[tuple[str, str, str | None]] = []

    def authentication_exchange(
        self, method: str, client_id: str, username: str | None
    ) -> AuthExchange | None:
        self.started.append((method, client_id, username))
        return TokenExchange() if method == TOKEN else None


def answer(user: str, nonce: bytes) -> bytes:
    return hmac.new(TOKENS[user], nonce, hashlib.sha256).digest()


class Peer5:
    """MQTT 5.0 over an in-memory connection."""

    def __init__(self, connection: MemoryConnection) -> None:
        self.connection = connection
        self.decoder = Decoder(protocol_level=V5, mqtt5=True)
        self.received: list[Packet] = []

    def send(self, packet: Packet) -> None:
        self.connection.write(encode(packet, V5))

    async def next(self, timeout: float = 5.0) -> Packet:
        while not self.received:
            data = await asyncio.wait_for(self.connection.read(), timeout)
            assert data, "connection closed"
            self.received += self.decoder.feed(data)
        return self.received.pop(0)

    async def closed(self, timeout: float = 5.0) -> bool:
        return await asyncio.wait_for(self.connection.read(), timeout) == b""


@contextlib.asynccontextmanager
async def in_memory(hook: Hook) -> AsyncIterator[tuple[Broker, MemoryListener]]:
    config = BrokerConfig()
    config.sys.interval = 0
    config.journal.enabled = False
    listener = MemoryListener()
    broker = Broker(config, store=MemoryStore(), hooks=[hook], listeners=[listener])
    await broker.start()
    try:
        yield broker, listener
    finally:
        await broker.stop()


async def token_login(listener: MemoryListener, user: str, client_id: str = "c") -> Peer5:
    peer = Peer5(await listener.connect())
    peer.send(Connect(client_id, protocol_level=V5, properties=auth_props(TOKEN, user.encode())))
    challenge = await peer.next()
    assert challenge == Auth(0x18, auth_props(TOKEN, b"n0nce"))
    peer.send(Auth(0x18, auth_props(TOKEN, answer(user, b"n0nce"))))
    return peer


def test_a_hooks_exchange_challenges_and_accepts_the_user_it_proves() -> None:
    async def main() -> None:
        hook = TokenHook()
        async with in_memory(hook) as (broker, listener):
            peer = await token_login(listener, "alice")
            connack = await peer.next()
            assert isinstance(connack, ConnAck) and connack.return_code == 0
            assert connack.properties is not None
            assert connack.properties.authentication_method == TOKEN
            assert connack.properties.authentication_data == b"welcome alice"
            assert hook.started == [(TOKEN, "c", None)]
            assert broker.sessions["c"].user_id == "alice"
            # The connection works as any other.
            peer.send(Subscribe(1, [("t", 1)]))
            assert isinstance(await peer.next(), SubAck)
            peer.send(Publish("t", b"x", 1, packet_id=2))
            packets = [await peer.next(), await peer.next()]
            assert PubAck(2) in packets

    asyncio.run(main())


def test_a_failed_exchange_gets_connack_0x86_with_the_reason() -> None:
    async def main() -> None:
        async with in_memory(TokenHook()) as (broker, listener):
            peer = Peer5(await listener.connect())
            peer.send(Connect("c", protocol_level=V5, properties=auth_props(TOKEN, b"alice")))
            await peer.next()
            peer.send(Auth(0x18, auth_props(TOKEN, answer("bob", b"n0nce"))))
            connack = await peer.next()
            assert isinstance(connack, ConnAck)
            assert connack.return_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD
            assert connack.properties is not None
            assert connack.properties.reason_string == "bad token for 'alice'"
            assert await peer.closed()
            assert "c" not in broker.sessions

    asyncio.run(main())


def test_a_method_no_hook_handles_gets_connack_0x8c() -> None:
    async def main() -> None:
        async with in_memory(TokenHook()) as (_, listener):
            peer = Peer5(await listener.connect())
            peer.send(Connect("c", protocol_level=V5, properties=auth_props("KERBEROS", b"")))
            connack = await peer.next()
            assert isinstance(connack, ConnAck)
            assert connack.return_code == ReasonCode.BAD_AUTHENTICATION_METHOD
            assert connack.properties is not None
            assert connack.properties.reason_string == (
                "authentication method 'KERBEROS' is not configured"
            )
            assert await peer.closed()

    asyncio.run(main())


def test_a_step_that_raises_is_a_logged_failure_and_the_broker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with in_memory(TokenHook()) as (_, listener):
            peer = Peer5(await listener.connect())
            peer.send(Connect("c", protocol_level=V5, properties=auth_props(TOKEN, b"explode")))
            connack = await peer.next()
            assert isinstance(connack, ConnAck)
            assert connack.return_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD
            assert connack.properties is not None
            assert "the token service is down" in (connack.properties.reason_string or "")
            other = await token_login(listener, "bob", "other")
            ok = await other.next()
            assert isinstance(ok, ConnAck) and ok.return_code == 0

    with caplog.at_level(logging.ERROR, "telemq.broker"):
        asyncio.run(main())
    assert "the token service is down" in caplog.text


def test_reauthentication_as_the_same_user_gets_auth_0x00() -> None:
    async def main() -> None:
        async with in_memory(TokenHook()) as (_, listener):
            peer = await token_login(listener, "alice")
            assert isinstance(await peer.next(), ConnAck)
            peer.send(Auth(0x19, auth_props(TOKEN, b"alice")))
            assert await peer.next() == Auth(0x18, auth_props(TOKEN, b"n0nce"))
            peer.send(Auth(0x18, auth_props(TOKEN, answer("alice", b"n0nce"))))
            assert await peer.next() == Auth(0x00, auth_props(TOKEN, b"welcome alice"))
            peer.send(Subscribe(1, [("t", 0)]))
            assert isinstance(await peer.next(), SubAck)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("user", "proof_of", "reason"),
    [
        ("bob", "bob", "re-authenticated as 'bob', not the connection's user 'alice'"),
        ("alice", "bob", "bad token for 'alice'"),
    ],
)
def test_a_failed_or_foreign_reauthentication_gets_disconnect_0x87(
    user: str, proof_of: str, reason: str
) -> None:
    async def main() -> None:
        async with in_memory(TokenHook()) as (_, listener):
            peer = await token_login(listener, "alice")
            assert isinstance(await peer.next(), ConnAck)
            peer.send(Auth(0x19, auth_props(TOKEN, user.encode())))
            await peer.next()
            peer.send(Auth(0x18, auth_props(TOKEN, answer(proof_of, b"n0nce"))))
            disconnect = await peer.next()
            assert disconnect == Disconnect(
                ReasonCode.NOT_AUTHORIZED, Properties(reason_string=reason)
            )
            assert await peer.closed()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# SCRAM-SHA-256 against a running broker's users

PASSWORDS = {"alice": "wonderland", "bob": "builder"}
ACL = [("alice", "all", "alice/#", True), ("bob", "all", "bob/#", True)]


@pytest.fixture
def secured(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerProcess:
    text = users_and_acl(PASSWORDS, ACL)
    return broker_factory(config=write_config(tmp_path / "users.toml", text))


def test_scram_logs_in_and_the_client_verifies_the_server(
    secured: BrokerProcess, raw5: Raw5Factory
) -> None:
    raw = raw5(secured.port)
    scram, connack = raw.scram_connect("alice", "wonderland", client_id="scram-alice")
    assert connack.return_code == 0
    assert connack.properties is not None
    assert connack.properties.authentication_method == SCRAM
    scram.verify(connack.properties.authentication_data)  # the server knew the password
    # Alice's ACL applies: her topics, not Bob's.
    raw.send(Subscribe(1, [("alice/x", 1), ("bob/x", 1)]))
    suback = raw.recv()
    assert isinstance(suback, SubAck) and suback.return_codes == [1, 0x87]
    raw.send(Publish("alice/x", b"hi", 1, packet_id=7))
    got = [raw.recv(), raw.recv()]
    assert any(isinstance(p, PubAck) and p.packet_id == 7 for p in got)
    assert any(isinstance(p, Publish) and p.payload == b"hi" for p in got)


@pytest.mark.parametrize(
    ("user", "password", "username"),
    [
        ("alice", "wrong", None),  # fails at the proof
        ("mallory", "wonderland", None),  # unknown: answered like a known name, then fails
        ("alice", "wonderland", "bob"),  # CONNECT's user name is not SCRAM's
    ],
)
def test_scram_refusals_get_connack_0x86(
    secured: BrokerProcess,
    raw5: Raw5Factory,
    user: str,
    password: str,
    username: str | None,
) -> None:
    raw = raw5(secured.port)
    _, connack = raw.scram_connect(user, password, username=username)
    assert connack.return_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    assert raw.wait_closed()
    # The broker goes on for everyone else.
    _, ok = raw5(secured.port).scram_connect("bob", "builder")
    assert ok.return_code == 0


def test_a_forged_proof_never_gets_a_signature(secured: BrokerProcess, raw5: Raw5Factory) -> None:
    raw = raw5(secured.port)
    _, connack = raw.scram_connect("alice", "not-her-password")
    assert connack.properties is not None
    assert connack.properties.authentication_data is None
    with pytest.raises(ScramError):
        ScramClient("alice", "x").verify(connack.properties.authentication_data)


def test_scram_reauthentication(secured: BrokerProcess, raw5: Raw5Factory) -> None:
    raw = raw5(secured.port)
    _, connack = raw.scram_connect("alice", "wonderland")
    assert connack.return_code == 0
    again = ScramClient("alice", "wonderland")
    raw.send(Auth(0x19, auth_props(SCRAM, again.first())))
    challenge = raw.recv()
    assert isinstance(challenge, Auth) and challenge.reason_code == 0x18
    assert challenge.properties is not None
    raw.send(Auth(0x18, auth_props(SCRAM, again.final(challenge.properties.authentication_data))))
    done = raw.recv()
    assert isinstance(done, Auth) and done.reason_code == 0 and done.properties is not None
    again.verify(done.properties.authentication_data)
    # Re-authenticating as another user ends the connection, at the first message.
    raw.send(Auth(0x19, auth_props(SCRAM, ScramClient("bob", "builder").first())))
    disconnect = raw.recv()
    assert disconnect == Disconnect(
        ReasonCode.NOT_AUTHORIZED,
        Properties(reason_string="SCRAM user 'bob' is not the user name 'alice'"),
    )
    assert raw.wait_closed()


def test_password_logins_still_work_beside_scram(secured: BrokerProcess, raw5: Raw5Factory) -> None:
    raw = raw5(secured.port)
    raw.send(Connect("pw", protocol_level=V5, username="bob", password=b"builder"))
    connack = raw.recv()
    assert isinstance(connack, ConnAck) and connack.return_code == 0
    assert connack.properties is not None and connack.properties.authentication_method is None


@pytest.mark.parametrize(
    "config_text",
    [
        "",  # no [[users]]: nobody to authenticate with SCRAM
        users_and_acl(PASSWORDS, []) + "\n[mqtt5]\nscram_sha_256 = false\n",
    ],
    # Named: the second text holds salted hashes, new at each collection, and every
    # pytest-xdist worker must collect the same test ids.
    ids=["no-users", "scram-off"],
)
def test_without_scram_the_method_gets_connack_0x8c(
    broker_factory: BrokerFactory,
    tmp_path: Path,
    raw5: Raw5Factory,
    config_text: str,
) -> None:
    broker = broker_factory(config=write_config(tmp_path / "b.toml", config_text))
    raw = raw5(broker.port)
    _, connack = raw.scram_connect("alice", "wonderland")
    assert connack.return_code == ReasonCode.BAD_AUTHENTICATION_METHOD
    assert connack.properties is not None
    assert connack.properties.reason_string == (
        "authentication method 'SCRAM-SHA-256' is not configured"
    )
    assert raw.wait_closed()
