"""Admission: whether a CONNECT is accepted, and as whom.

Theory of operation
-------------------
Every CONNECT comes here first (`on_connect_requested`, from the hub's handler table), and
is either refused with the CONNACK code the protocol gives (`refuse`) or handed to the
`Sessions` room as a client id and a user (`Sessions.accept`), which gives it its session.
It owns no state: it reads the sessions (the connection count, the owner of the session a
client id names) and runs MQTT 5.0 enhanced authentication through `Authentications`
(authentication.py), whose exchanges are kept on each `Client`.

The checks, in order:

- the connection limit (`limits.max_connections`);
- who the client is: the user an MQTT 5.0 AUTH exchange proved (the CONNECT waits for the
  exchange), the name in its verified certificate on a listener that says so
  (`use_identity_as_username`: no password asked), or its user name and password, checked
  by the hooks; on a worker thread when a hook says its check is slow, reading paused
  meanwhile (`_authenticate_later`);
- its will's topic, within the topic limits (else the connection closes, as for a PUBLISH);
- its client id: `$bridge/` and `$remote/` ids are the network's;
- its will's topic again: a will under one of the broker's own prefixes (`$SYS/`, ...:
  security/reserved.py) is refused with CONNACK 5 (0x87), for every user, and counted as a
  denied publication;
- a `$link/` client id must pass the links room's gate (`Sessions.link_gate`) and then
  belongs to `LINK_OWNER`;
- the session it names, if any, must be its user's: another user connecting with the same
  client id is refused with CONNACK 5 (not authorized), whatever its clean-session flag.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from ...protocol import (
    AuthRequested,
    ConnectRequested,
    ConnectReturnCode,
    ReasonCode,
    TopicLimits,
)
from ..security.hooks import Hooks
from ..security.reserved import reserved_topic_problem
from ..settings.tls import certificate_identity
from .authentication import Authentications
from .sessions import BRIDGE_PREFIX, LINK_OWNER, LINK_PREFIX, REMOTE_PREFIX, Sessions

if TYPE_CHECKING:
    from ..settings.config import LimitsConfig
    from .session import Client
    from .stats import BrokerStats

log = logging.getLogger("telemq.broker")

# The CONNACK codes of a refusal for who the client is (counted for /metrics).
_AUTHENTICATION_FAILURES = frozenset(
    (ConnectReturnCode.BAD_USERNAME_OR_PASSWORD, ConnectReturnCode.NOT_AUTHORIZED)
)


class Admission:
    """Accepts or refuses each CONNECT (see module docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limits: LimitsConfig,
        stats: BrokerStats,
        hooks: Hooks,
        topic_limits: TopicLimits,
        sessions: Sessions,
    ) -> None:
        self._loop = loop
        self._limits = limits
        self._stats = stats
        self._hooks = hooks
        self._topic_limits = topic_limits
        self._sessions = sessions
        self.authentications = Authentications(
            hooks,
            loop,
            lambda client, event, user, data: self._connect(client, event, True, user, data),
            lambda client, reason, code: self.refuse(
                client, ConnectReturnCode.NOT_AUTHORIZED, reason, code
            ),
        )

    def on_connect_requested(self, client: Client, event: ConnectRequested) -> None:
        """A CONNECT: decided now, or once its password is checked off the loop."""
        if not self._authenticate_later(client, event):
            self._connect(client, event)

    def on_auth(self, client: Client, event: AuthRequested) -> None:
        """An AUTH packet: the next step of an exchange (authentication.py)."""
        self.authentications.on_auth(client, event)

    def _authenticate_later(self, client: Client, event: ConnectRequested) -> bool:
        """Check a password off the event loop (a key derivation takes a while).

        The connection buffers whatever follows CONNECT until it is answered; reading
        pauses meanwhile, and resumes with those bytes once the client is accepted.
        """
        hooks = self._hooks
        packet = event.packet
        if (
            not hooks.authenticate_off_loop
            or packet.username is None
            or client.listener.use_identity_as_username
            or (packet.properties is not None and packet.properties.authentication_method)
        ):
            return False
        if client.transport is not None:
            client.transport.pause_reading()
        future = self._loop.run_in_executor(
            None, hooks.authenticate, packet.client_id, packet.username, packet.password
        )

        def done(result: asyncio.Future[bool]) -> None:
            if client.transport is not None and not client.transport.is_closing():
                client.transport.resume_reading()
            ok = not result.cancelled() and result.exception() is None and result.result()
            if client.connection is None or client.connection.closed:
                return
            if ok:
                self._connect(client, event, authenticated=True)
                client.data_received(b"")
            else:
                self.refuse(
                    client,
                    ConnectReturnCode.BAD_USERNAME_OR_PASSWORD,
                    f"bad user name or password for {packet.username!r}",
                )
            client.flush()

        future.add_done_callback(done)
        return True

    def refuse(
        self,
        client: Client,
        code: ConnectReturnCode,
        reason: str,
        code5: ReasonCode | None = None,
    ) -> None:
        """CONNACK with `code` (`code5` at MQTT 5.0), and the connection ends."""
        connection = client.connection
        assert connection is not None
        if code in _AUTHENTICATION_FAILURES:
            self._stats.authentication_failures += 1
        closed = connection.refuse(code, reason, code5)
        self._sessions.on_closed(client, closed)

    def _connect(
        self,
        client: Client,
        event: ConnectRequested,
        authenticated: bool = False,
        proven: str | None = None,
        auth_data: bytes | None = None,
    ) -> None:
        """Accept or refuse a CONNECT. `authenticated`: its password verified already;
        `proven`: the user an enhanced authentication proved, whose last data is
        `auth_data` (authentication.py)."""
        packet = event.packet
        limits = self._limits
        sessions = self._sessions
        if limits.max_connections and sessions.connected >= limits.max_connections:
            self.refuse(
                client,
                ConnectReturnCode.SERVER_UNAVAILABLE,
                f"connection limit of {limits.max_connections} reached",
            )
            return
        props = packet.properties
        if props is not None and props.authentication_method is not None and proven is None:
            self.authentications.begin(client, event)
            return
        hooks = self._hooks
        user_id = (packet.username or "") if proven is None else proven
        authenticated = authenticated or proven is not None
        if client.listener.use_identity_as_username:
            # The certificate vouches for the user; the password is not asked for.
            certificate_user = (
                certificate_identity(client.transport) if client.transport is not None else None
            )
            if certificate_user is None:
                self.refuse(
                    client, ConnectReturnCode.NOT_AUTHORIZED, "no client certificate identity"
                )
                return
            user_id = certificate_user
            authenticated = True
        if (
            not authenticated
            and hooks.authenticators
            and not hooks.authenticate(packet.client_id, packet.username, packet.password)
        ):
            if packet.username is None:
                self.refuse(client, ConnectReturnCode.NOT_AUTHORIZED, "anonymous access is off")
            else:
                self.refuse(
                    client,
                    ConnectReturnCode.BAD_USERNAME_OR_PASSWORD,
                    f"bad user name or password for {packet.username!r}",
                )
            return
        if packet.will is not None:
            too_large = self._topic_limits.size_error(packet.will.topic)
            if too_large is not None:
                client.close(f"will refused: {too_large}", ReasonCode.TOPIC_NAME_INVALID)
                return
        client_id = packet.client_id or f"telemq-{uuid.uuid4().hex[:16]}"
        if client_id.startswith((BRIDGE_PREFIX, REMOTE_PREFIX)):  # `$link/`: the gate below
            self.refuse(
                client,
                ConnectReturnCode.IDENTIFIER_REJECTED,
                f"client id {client_id!r}: {BRIDGE_PREFIX}... and {REMOTE_PREFIX}... client ids"
                " are the network's",
                ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
            )
            return
        if packet.will is not None and packet.will.topic.startswith("$"):
            reserved = reserved_topic_problem(packet.will.topic, client_id)
            if reserved is not None:
                # A will the broker would never publish: refused now, as MQTT 5.0 refuses
                # one it could not publish as given [MQTT-3.2.2-12], and counted as denied.
                self._stats.publish_denied += 1
                connection = client.connection
                assert connection is not None
                closed = connection.refuse(
                    ConnectReturnCode.NOT_AUTHORIZED,
                    f"will refused: {reserved}",
                    ReasonCode.NOT_AUTHORIZED,
                )
                sessions.on_closed(client, closed)
                return
        link = client_id.startswith(LINK_PREFIX)
        if link:
            gate = sessions.link_gate
            refusal = (
                "no links are configured" if gate is None else gate.refusal(client, packet, user_id)
            )
            if refusal is not None:
                if gate is None:  # the gate logs its own (a cycle at most once an hour)
                    log.warning("link from %s refused: %s", client.peer, refusal)
                self.refuse(
                    client, ConnectReturnCode.NOT_AUTHORIZED, refusal, ReasonCode.NOT_AUTHORIZED
                )
                return
            user_id = LINK_OWNER  # the link session's owner: no client can resume it
        session = sessions.by_id.get(client_id)
        if session is not None and session.user_id != user_id:
            log.warning(
                "client %r from %s (user %r) refused: the session belongs to another user",
                client_id,
                client.peer,
                user_id,
            )
            self.refuse(
                client,
                ConnectReturnCode.NOT_AUTHORIZED,
                f"client id {client_id!r} belongs to another user's session",
            )
            return
        sessions.accept(client, packet, client_id, user_id, link, auth_data)
