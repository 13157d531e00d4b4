"""The broker: the only asyncio code of telemq.

Theory of operation: see `server.py`. `client.py` is the asyncio edge (one
protocol object per TCP connection around a sans-IO `protocol.Connection`),
`session.py` holds messages, deliveries and sessions, `topic_tree.py` the
subscription trie, `committer.py` the group commit, `config.py` the settings, `tuning.py` the
interpreter settings of a broker process.
"""

from .config import (
    BrokerConfig,
    ConfigError,
    JournalConfig,
    LimitsConfig,
    ListenerConfig,
    StoreConfig,
    SysConfig,
    load_config,
)
from .server import Broker, run_broker
from .tuning import tune_interpreter

__all__ = [
    "Broker",
    "BrokerConfig",
    "ConfigError",
    "JournalConfig",
    "LimitsConfig",
    "ListenerConfig",
    "StoreConfig",
    "SysConfig",
    "load_config",
    "run_broker",
    "tune_interpreter",
]
