"""The broker: the only asyncio code of telemq.

Theory of operation: see `server.py`, which wires the rooms and lists what each owns, and
docs/architecture.md for the map: the wiring at the top (server.py, web.py, embedded.py,
tuning.py), then `settings/` (configuration, TLS), `security/` (users, ACL, hooks), `core/`
(the state and the per-message path), `edges/` (listeners, HTTP, WebSockets), `peers/`
(links, bridges) and `operations/` ($SYS, /metrics, the admin API, the MQ commands).
This module is the public API; its names keep working wherever their modules move.
"""

from .edges.listeners import Listener, MemoryListener, TcpListener
from .security.hooks import Hook
from .server import Broker, run_broker
from .settings.config import (
    BrokerConfig,
    HaConfig,
    HttpConfig,
    JournalConfig,
    LimitsConfig,
    ListenerConfig,
    SparkplugConfig,
    StoreConfig,
    SysConfig,
    load_config,
)
from .settings.errors import ConfigError
from .tuning import reserve_descriptors, tune_interpreter

__all__ = [
    "Broker",
    "BrokerConfig",
    "ConfigError",
    "HaConfig",
    "Hook",
    "HttpConfig",
    "JournalConfig",
    "LimitsConfig",
    "Listener",
    "ListenerConfig",
    "MemoryListener",
    "SparkplugConfig",
    "StoreConfig",
    "SysConfig",
    "TcpListener",
    "load_config",
    "reserve_descriptors",
    "run_broker",
    "tune_interpreter",
]
