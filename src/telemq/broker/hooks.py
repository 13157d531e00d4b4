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

Notifications (`on_message_accepted`, `on_session_up`, `on_session_down`, `on_subscribed`,
`on_unsubscribed`) run on the event loop right after the broker's own state changed. They
must not block: hand slow work to a task or a thread. An exception in one is logged and
does not reach the client.

Persistence is not a hook: acknowledgements are ordered by commits (`committer.py`), and no
hook may reorder them. The users and ACL rules of the configuration are the first hook,
`AclHook`, installed when the configuration has any.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .auth import Action, Authorizer

if TYPE_CHECKING:
    from ..subscriptions import Subscription
    from .session import Message

log = logging.getLogger("telemq.broker")


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

    def on_message_accepted(self, message: Message) -> None:
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

    def notify(self, listeners: tuple[Callable[..., Any], ...], *args: Any) -> None:
        """Call each listener of a notification; a failing hook is logged, never raised."""
        for listener in listeners:
            try:
                listener(*args)
            except Exception:
                log.exception("hook %r failed", listener)


class AclHook(Hook):
    """The configuration's users, anonymous access and ACL rules (`auth.Authorizer`)."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        # Password checks derive a key (about 10 ms each): never on the event loop.
        self.authenticate_off_loop = authorizer.has_users

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None
    ) -> bool | None:
        return self.authorizer.authenticate(username, password)

    def authorize(self, action: Action, topic: str, user_id: str, client_id: str) -> bool | None:
        return self.authorizer.allowed(action, topic, user=user_id or None, client_id=client_id)

    def is_admin(self, user_id: str) -> bool | None:
        return self.authorizer.is_admin(user_id or None)


def acl_hook(authorizer: Authorizer) -> AclHook | None:
    """The default hook, or None when it has nothing to check (no users, no rules, anonymous
    access allowed): an open broker keeps authorization off its per-message path."""
    if authorizer.open and not authorizer.has_users and authorizer.allow_anonymous:
        return None
    return AclHook(authorizer)
