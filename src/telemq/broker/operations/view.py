"""`BrokerView`: what the operators' reports read of a running broker.

Theory of operation
-------------------
`/metrics` (metrics.py) and `/api/v1` (admin_api.py) render what the rooms count and hold;
they take this view, which the wiring's `Broker` satisfies, never the broker itself, so a
report cannot reach into a room it does not read. The view names the rooms it exposes
(read-only by convention: a change goes through the operations at the end, which are the
same the embedding API offers), and the peers' counters come as plain `PeerCounters`, so
operations never import the peers' package.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...store import Store
    from ...subscriptions import Registry
    from ..core.committer import Committer
    from ..core.message import Message
    from ..core.retained import RetainedMessages
    from ..core.router import Router
    from ..core.session import Client, Session
    from ..core.sessions import Sessions
    from ..core.stats import BrokerStats, PeerCounters
    from ..settings.config import BrokerConfig
    from .sys import SysReporter


class BrokerView(Protocol):
    """A running broker as its operators' reports see it (see the module docstring)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def sys(self) -> SysReporter: ...
    @property
    def registry(self) -> Registry: ...
    @property
    def retained(self) -> RetainedMessages: ...
    @property
    def router(self) -> Router: ...
    @property
    def committer(self) -> Committer: ...
    @property
    def sessions_room(self) -> Sessions: ...
    @property
    def sessions(self) -> dict[str, Session]: ...
    @property
    def clients(self) -> set[Client]: ...
    @property
    def sub_points(self) -> set[str]: ...
    @property
    def store(self) -> Store: ...
    @property
    def store_executor(self) -> ThreadPoolExecutor | None: ...

    def peer_counters(self) -> dict[str, list[PeerCounters]]:
        """Links' and bridges' counters, by kind ("link", "bridge")."""
        ...

    # The operations an administrator may run (the embedding API's).
    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        sub_point: str = "",
        journal: bool = True,
    ) -> None: ...

    def matching_retained(self, sub_point: str, topic_filter: str) -> list[Message]: ...

    def delete_retained(self, sub_point: str, topic: str, network: bool = False) -> bool: ...
