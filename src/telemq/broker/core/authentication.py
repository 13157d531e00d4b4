"""Enhanced authentication (MQTT 5.0 AUTH, §4.12): the hooks' exchanges, run per connection.

Theory of operation
-------------------
A CONNECT with an Authentication Method, or an AUTH 0x19 from a connected client, starts an
exchange from the hooks (`Hooks.authentication_exchange`; the configuration's users offer
SCRAM-SHA-256). The exchange stays on the client (`Client.authenticating`) until it ends; the
Authentication Data of the CONNECT or AUTH that started it, then of each AUTH 0x18, goes to
its `step`, whose answer goes back through the connection:

- continue: AUTH 0x18 with the server's data; the connection reads the client's next AUTH.
- success: for a CONNECT, `Admission` goes on as for a CONNECT whose password verified, as
  the user the exchange proved, and CONNACK carries the server's last data; for a
  re-authentication, AUTH 0x00 with that data, unless the client proved to be another user
  than the one connected (DISCONNECT 0x87: a connection never changes its user).
- failure: CONNACK 0x86 for a CONNECT, DISCONNECT 0x87 after a re-authentication.

A method no hook handles is refused with CONNACK 0x8C (Bad authentication method), and so
is any method on a listener whose users are the names of their certificates. An exception
in a step is a failure, logged: a broken hook must not take the broker down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...protocol import AuthRequested, ConnectRequested, ReasonCode
from ..security.hooks import AuthExchange, AuthOutcome, AuthStep, Hooks
from .session import Authenticating

if TYPE_CHECKING:
    import asyncio

    from .session import Client

log = logging.getLogger("telemq.broker")

# What `Admission` (admission.py) does at the end of a CONNECT's exchange.
Accept = Callable[["Client", ConnectRequested, str, "bytes | None"], None]
Refuse = Callable[["Client", str, ReasonCode], None]


class Authentications:
    """The exchanges of enhanced authentication (see module docstring)."""

    def __init__(
        self, hooks: Hooks, loop: asyncio.AbstractEventLoop, accept: Accept, refuse: Refuse
    ) -> None:
        self._hooks = hooks
        self._loop = loop
        self._accept = accept
        self._refuse = refuse

    def begin(self, client: Client, event: ConnectRequested) -> None:
        """A CONNECT with an Authentication Method: start its exchange, or refuse it."""
        packet = event.packet
        method = packet.properties.authentication_method if packet.properties else None
        assert method is not None
        exchange = None
        if not client.listener.use_identity_as_username:
            exchange = self._hooks.authentication_exchange(
                method, packet.client_id, packet.username
            )
        if exchange is None:
            self._refuse(
                client,
                f"authentication method {method!r} is not configured",
                ReasonCode.BAD_AUTHENTICATION_METHOD,
            )
            return
        client.authenticating = Authenticating(exchange, event)
        assert packet.properties is not None
        self._step(client, exchange, packet.properties.authentication_data)

    def on_auth(self, client: Client, event: AuthRequested) -> None:
        """An AUTH from the client: the next step, or the start of a re-authentication."""
        authenticating = client.authenticating
        exchange = authenticating.exchange if authenticating is not None else None
        if event.starts_reauthentication:
            connection = client.connection
            method = connection.peer5.auth_method if connection and connection.peer5 else None
            assert method is not None
            exchange = self._hooks.authentication_exchange(
                method, client.client_id, client.user_id or None
            )
            if exchange is None:
                client.close(
                    f"authentication method {method!r} is no longer configured",
                    ReasonCode.BAD_AUTHENTICATION_METHOD,
                )
                return
            client.authenticating = Authenticating(exchange, None)
        if exchange is None:  # an AUTH after the exchange ended (the connection is closing)
            return
        self._step(client, exchange, event.data)

    def _step(self, client: Client, exchange: AuthExchange, data: bytes | None) -> None:
        try:
            step = exchange.step(data)
            if not isinstance(step, AuthStep):
                raise TypeError(f"step() returned {step!r}, not an AuthStep")
        except Exception as error:
            log.exception("authentication exchange %r failed", exchange)
            step = AuthStep(AuthOutcome.FAILURE, reason=f"authentication failed: {error}")
        connection = client.connection
        if connection is None or connection.closed:
            return
        authenticating = client.authenticating
        connect = authenticating.connect if authenticating is not None else None
        if step.outcome is AuthOutcome.CONTINUE:
            connection.continue_authentication(step.data, self._loop.time())
            return
        client.authenticating = None
        if step.outcome is AuthOutcome.SUCCESS:
            if connect is not None:
                user = step.user if step.user is not None else connect.packet.username or ""
                self._accept(client, connect, user, step.data)
            elif step.user is not None and step.user != client.user_id:
                client.close(
                    f"re-authenticated as {step.user!r}, not the connection's user "
                    f"{client.user_id!r}",
                    ReasonCode.NOT_AUTHORIZED,
                )
            else:
                connection.reauthenticated(step.data)
            return
        reason = step.reason or "authentication failed"
        log.warning("client %r from %s: %s", client.client_id, client.peer, reason)
        if connect is not None:
            self._refuse(client, reason, ReasonCode.BAD_USER_NAME_OR_PASSWORD)
        else:
            client.close(reason, ReasonCode.NOT_AUTHORIZED)
