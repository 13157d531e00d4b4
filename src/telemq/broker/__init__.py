"""The broker: the only asyncio code of telemq.

Theory of operation: see `server.py`, which wires the rooms (sessions, router, delivery,
subscribe, retained, stats, housekeeping) and lists what each owns. `client.py` is the asyncio
edge (one protocol object per connection around a sans-IO `protocol.Connection`),
`listeners.py` where connections come from, `http.py` the HTTP listeners (the journal
service), `hooks.py` the extension points, `session.py`
messages, deliveries and sessions, `committer.py` the group commit, `config.py` the settings,
`tuning.py` the interpreter settings of a broker process.
"""

from .edges.listeners import Listener, MemoryListener, TcpListener
from .security.hooks import Hook
from .server import Broker, run_broker
from .settings.config import (
    BrokerConfig,
    HttpConfig,
    JournalConfig,
    LimitsConfig,
    ListenerConfig,
    StoreConfig,
    SysConfig,
    load_config,
)
from .settings.errors import ConfigError
from .tuning import tune_interpreter

__all__ = [
    "Broker",
    "BrokerConfig",
    "ConfigError",
    "Hook",
    "HttpConfig",
    "JournalConfig",
    "LimitsConfig",
    "Listener",
    "ListenerConfig",
    "MemoryListener",
    "StoreConfig",
    "SysConfig",
    "TcpListener",
    "load_config",
    "run_broker",
    "tune_interpreter",
]
