"""telemq: an MQTT broker with the IBM MQ publish/subscribe model and a Spark data pipeline.

`telemq.Broker` and `telemq.BrokerConfig` embed a broker in an asyncio program
(docs/architecture.md, "Embedding"). They are imported on first use, so that the pipeline's
Spark workers, which import `telemq`, never load the broker.
"""

from typing import Any

__version__ = "0.1.0"

_EMBEDDING = {"Broker", "BrokerConfig", "Hook", "MemoryListener"}


def __getattr__(name: str) -> Any:
    if name in _EMBEDDING:
        from . import broker

        return getattr(broker, name)
    raise AttributeError(f"module 'telemq' has no attribute {name!r}")


def compiled() -> bool:
    """Whether the per-message modules run compiled by mypyc (the default install) or as
    Python source (``TELEMQ_PURE_PYTHON=1``, no C compiler, or running from a checkout)."""
    from .protocol import codec

    return not codec.__file__.endswith(".py")


def version_text() -> str:
    """The version and the build that runs (`telemq 0.1.0 (compiled)`): --version, logs."""
    return f"telemq {__version__} ({'compiled' if compiled() else 'pure Python'})"
