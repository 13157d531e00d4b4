"""`CoreRooms`: the core's rooms, handed as one bundle to the rooms outside the core.

Theory of operation
-------------------
The peers (links, bridges) work on the core's state: they open sessions, route what
arrives, pump queues. They get the rooms that own that state, not the `Broker`: each room
changes its own state through its methods (`Sessions.ensure_link_session`,
`Router.set_envelope`, `Deliveries.set_link_limits`), so a peer never sets another room's
field. The bundle is a concrete class, so the per-message calls of a link (a forwarded
copy's `router.on_link_publish`) stay compiled attribute reads.
"""

from __future__ import annotations

from ...protocol import TopicLimits
from ...subscriptions import Registry
from ..security.hooks import Hooks
from ..settings.config import BrokerConfig
from .committer import Committer
from .delivery import Deliveries
from .retained import RetainedMessages
from .router import Router
from .session import ClientHub
from .sessions import Sessions
from .stats import BrokerStats
from .subscribe import SubscriptionManager


class CoreRooms:
    """The core's rooms of one broker, built by the wiring (server.py) once they exist."""

    __slots__ = (
        "committer",
        "config",
        "deliveries",
        "hooks",
        "hub",
        "registry",
        "retained",
        "router",
        "sessions",
        "stats",
        "sub_points",
        "subscriptions",
        "topic_limits",
    )

    def __init__(
        self,
        config: BrokerConfig,
        hub: ClientHub,
        hooks: Hooks,
        committer: Committer,
        sessions: Sessions,
        subscriptions: SubscriptionManager,
        router: Router,
        deliveries: Deliveries,
        retained: RetainedMessages,
        registry: Registry,
        stats: BrokerStats,
        topic_limits: TopicLimits,
        sub_points: set[str],
    ) -> None:
        self.config = config
        self.hub = hub
        self.hooks = hooks
        self.committer = committer
        self.sessions = sessions
        self.subscriptions = subscriptions
        self.router = router
        self.deliveries = deliveries
        self.retained = retained
        self.registry = registry
        self.stats = stats
        self.topic_limits = topic_limits
        self.sub_points = sub_points
