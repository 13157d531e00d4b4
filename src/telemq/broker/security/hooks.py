"""Hooks: where a deployment decides who may do what, and learns what happened.

Theory of operation
-------------------
A `Hook` subclass overrides the events it cares about; every default means "no opinion" or
"nothing to do". When the broker is built, its hooks are resolved into `Hooks`: for each
event, the tuple of the methods that some hook overrides. An event nobody listens to costs
one test of an empty tuple on its path, so a broker without hooks pays nothing.

Decisions:

- `authenticate`: hooks are asked in order; the first True or False decides. With no
  opinion at all the connection is accepted (an open broker, as Mosquitto's default
  listener with `allow_anonymous true`).
- `authorize` (publish, subscribe, command): every hook with an opinion is asked; the first
  False denies. Deny wins. The `queue` action (using a queue another user owns) needs more:
  no False and at least one True, so a broker without hooks never grants it.
- `is_admin`: a user any hook calls an administrator sees every user's subscriptions and
  may register for any queue (sessions stay their owners': see sessions.py).
- `authentication_exchange` (MQTT 5.0 enhanced authentication): for a CONNECT with an
  Authentication Method, the first hook that returns an `AuthExchange` runs the exchange;
  each of the client's messages goes to its `step`, which says continue (with the data for
  AUTH 0x18), succeed (as which user) or fail. No hook for the method: CONNACK 0x8C. The
  same happens for a re-authentication (AUTH 0x19), which may not change the user. The
  configuration's users offer SCRAM-SHA-256 this way (`AclHook`). Steps run on the event
  loop and must not block.

Notifications (`on_message_accepted`, `on_session_up`, `on_session_down`, `on_subscribed`,
`on_unsubscribed`) run on the event loop right after the broker's own state changed. They
must not block: hand slow work to a task or a thread. An exception in one is logged and
does not reach the client.

Persistence is not a hook: acknowledgements are ordered by commits (`committer.py`), and no
hook may reorder them. The users and ACL rules of the configuration are the first hook,
`AclHook`, installed when the configuration has any.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ...protocol import scram
from .acl import Action
from .auth import Authorizer

if TYPE_CHECKING:
    from ...subscriptions import Subscription

log = logging.getLogger("telemq.broker")


class AcceptedMessage(Protocol):
    """What a hook reads of an accepted publication (the core's `Message` is one): hooks
    sit below the core, so they name the fields, not the class."""

    @property
    def topic(self) -> str: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def qos(self) -> int: ...
    @property
    def retain(self) -> bool: ...
    @property
    def sub_point(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def ts_us(self) -> int:
        """UTC microseconds of its arrival."""
        ...


class AuthOutcome(enum.Enum):
    CONTINUE = "continue"  # send the data in AUTH 0x18 and wait for the client's next
    SUCCESS = "success"  # accept: CONNACK 0 (or AUTH 0x00 after a re-authentication)
    FAILURE = "failure"  # refuse: CONNACK 0x86 (or DISCONNECT 0x87 after a re-authentication)


@dataclass(frozen=True, slots=True)
class AuthStep:
    """What an `AuthExchange` decided about one message of the client.

    `data`: the server's Authentication Data to send; `user`: on success, the user the
    client proved to be (None: the CONNECT's user name); `reason`: on failure, why, for the
    log and the client's Reason String.
    """

    outcome: AuthOutcome
    data: bytes | None = None
    user: str | None = None
    reason: str = ""


class AuthExchange:
    """One enhanced authentication in progress: the client's Authentication Data of CONNECT
    (or of AUTH 0x19), then of each AUTH 0x18, goes to `step` in turn."""

    def step(self, data: bytes | None) -> AuthStep:
        raise NotImplementedError


class Hook:
    """Override the events you need; see the module docstring for the rules."""

    # True when `authenticate` is slow (a key derivation): for a CONNECT with a user name,
    # the whole chain of `authenticate` hooks then runs on a worker thread, and the client's
    # reads wait for it. Such hooks must be thread-safe.
    authenticate_off_loop = False

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None
    ) -> bool | None:
        """May a client with these CONNECT credentials connect? None: no opinion."""
        return None

    def authorize(self, action: Action, topic: str, user_id: str, client_id: str) -> bool | None:
        """May this client publish / subscribe / send a command on `topic`? None: no opinion."""
        return None

    def is_admin(self, user_id: str) -> bool | None:
        """Is this user an administrator of the broker's subscriptions? None: no opinion."""
        return None

    def authentication_exchange(
        self, method: str, client_id: str, username: str | None
    ) -> AuthExchange | None:
        """A new exchange for MQTT 5.0 Authentication Method `method`; None: not this hook's
        method. `username` is the CONNECT's (or the connected user's, to re-authenticate)."""
        return None

    def on_message_accepted(self, message: AcceptedMessage) -> None:
        """A publication was accepted (retained, journaled and routed)."""

    def on_session_up(self, client_id: str, user_id: str, resumed: bool) -> None:
        """A client's CONNECT was accepted; `resumed`: its persistent session was kept."""

    def on_session_down(self, client_id: str, graceful: bool, reason: str) -> None:
        """A connected client's connection ended (`graceful`: it sent DISCONNECT)."""

    def on_subscribed(self, subscription: Subscription) -> None:
        """A subscription was made or replaced (MQTT SUBSCRIBE or MQ RegSub)."""

    def on_unsubscribed(self, subscription: Subscription) -> None:
        """A subscription was removed (UNSUBSCRIBE, DeregSub, expiry, end of a session)."""


def _overriding(hooks: Sequence[Hook], name: str) -> list[Hook]:
    """The hooks whose class overrides method `name` of `Hook`."""
    base = getattr(Hook, name)
    return [h for h in hooks if getattr(type(h), name) is not base]


def _overridden(hooks: Sequence[Hook], name: str) -> tuple[Callable[..., Any], ...]:
    return tuple(getattr(h, name) for h in _overriding(hooks, name))


class Hooks:
    """The broker's hooks, resolved per event (see module docstring)."""

    __slots__ = (
        "accepted",
        "admins",
        "authenticate_off_loop",
        "authenticators",
        "authorizers",
        "exchanges",
        "session_down",
        "session_up",
        "subscribed",
        "unsubscribed",
    )

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        authenticating = _overriding(hooks, "authenticate")
        self.authenticators = tuple(h.authenticate for h in authenticating)
        self.authenticate_off_loop = any(h.authenticate_off_loop for h in authenticating)
        self.authorizers = _overridden(hooks, "authorize")
        self.admins = _overridden(hooks, "is_admin")
        self.exchanges = _overridden(hooks, "authentication_exchange")
        self.accepted = _overridden(hooks, "on_message_accepted")
        self.session_up = _overridden(hooks, "on_session_up")
        self.session_down = _overridden(hooks, "on_session_down")
        self.subscribed = _overridden(hooks, "on_subscribed")
        self.unsubscribed = _overridden(hooks, "on_unsubscribed")

    def authenticate(self, client_id: str, username: str | None, password: bytes | None) -> bool:
        for authenticate in self.authenticators:
            verdict = authenticate(client_id, username, password)
            if verdict is not None:
                return bool(verdict)
        return True

    def may(self, action: Action, topic: str, user_id: str, client_id: str) -> bool:
        for authorize in self.authorizers:
            if authorize(action, topic, user_id, client_id) is False:
                return False
        return True

    def granted(self, action: Action, topic: str, user_id: str, client_id: str) -> bool:
        """Allowed explicitly: some hook says True and none says False."""
        verdicts = [authorize(action, topic, user_id, client_id) for authorize in self.authorizers]
        return True in verdicts and False not in verdicts

    def is_admin(self, user_id: str) -> bool:
        return any(is_admin(user_id) for is_admin in self.admins)

    def may_use_queue(self, user: str, client_id: str, queue: str) -> bool:
        """May this user register for (or put to) another user's queue? Admins may;
        others need a hook's explicit grant of the `queue` action."""
        return self.is_admin(user) or self.granted(Action.QUEUE, queue, user, client_id)

    def authentication_exchange(
        self, method: str, client_id: str, username: str | None
    ) -> AuthExchange | None:
        """The exchange of the first hook that handles `method`; None when none does."""
        for start in self.exchanges:
            exchange = start(method, client_id, username)
            if exchange is not None:
                assert isinstance(exchange, AuthExchange)
                return exchange
        return None

    def notify(self, listeners: tuple[Callable[..., Any], ...], *args: Any) -> None:
        """Call each listener of a notification; a failing hook is logged, never raised."""
        for listener in listeners:
            try:
                listener(*args)
            except Exception:
                log.exception("hook %r failed", listener)


class AclHook(Hook):
    """The configuration's users, anonymous access and ACL rules (`auth.Authorizer`)."""

    def __init__(self, authorizer: Authorizer, scram_enabled: bool = True) -> None:
        self.authorizer = authorizer
        # Password checks derive a key (about 10 ms each): never on the event loop.
        self.authenticate_off_loop = authorizer.has_users
        self.scram_enabled = scram_enabled and authorizer.has_users

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None
    ) -> bool | None:
        return self.authorizer.authenticate(username, password)

    def authorize(self, action: Action, topic: str, user_id: str, client_id: str) -> bool | None:
        return self.authorizer.allowed(action, topic, user=user_id or None, client_id=client_id)

    def is_admin(self, user_id: str) -> bool | None:
        return self.authorizer.is_admin(user_id or None)

    def authentication_exchange(
        self, method: str, client_id: str, username: str | None
    ) -> AuthExchange | None:
        """SCRAM-SHA-256 against the configured users' hashes, when there are users."""
        if method != scram.METHOD or not self.scram_enabled:
            return None
        return ScramExchange(self.authorizer.scram_server(), username)


class ScramExchange(AuthExchange):
    """SCRAM-SHA-256 (protocol/scram.py) as an exchange: client-first in CONNECT, then
    client-final in AUTH; the SCRAM user must be the CONNECT's user name when it has one."""

    def __init__(self, server: scram.ScramServer, username: str | None) -> None:
        self._server = server
        self._username = username
        self._first = True

    def step(self, data: bytes | None) -> AuthStep:
        server = self._server
        try:
            if self._first:
                self._first = False
                reply = server.first(data)
                if self._username is not None and server.user != self._username:
                    return AuthStep(
                        AuthOutcome.FAILURE,
                        reason=f"SCRAM user {server.user!r} is not the user name "
                        f"{self._username!r}",
                    )
                return AuthStep(AuthOutcome.CONTINUE, reply)
            return AuthStep(AuthOutcome.SUCCESS, server.final(data), user=server.user)
        except scram.ScramError as error:
            return AuthStep(AuthOutcome.FAILURE, reason=f"{scram.METHOD}: {error}")


def acl_hook(authorizer: Authorizer, scram_enabled: bool = True) -> AclHook | None:
    """The default hook, or None when it has nothing to check (no users, no rules, anonymous
    access allowed): an open broker keeps authorization off its per-message path."""
    if authorizer.open and not authorizer.has_users and authorizer.allow_anonymous:
        return None
    return AclHook(authorizer, scram_enabled)
