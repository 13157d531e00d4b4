"""Subscriptions, MQTT and MQ alike: the registry, identities, options and the topic trie.

Pure data and policy, no I/O. See `registry` for the theory of operation.
"""

from .registry import (
    PERSISTENCE_RANK,
    STORED_OPTIONS,
    DeliveryOptions,
    Identity,
    Persistence,
    Registry,
    Route,
    Subscription,
    SubscriptionKey,
    delivery_options,
)
from .topic_tree import SubscriptionTree

__all__ = [
    "PERSISTENCE_RANK",
    "STORED_OPTIONS",
    "DeliveryOptions",
    "Identity",
    "Persistence",
    "Registry",
    "Route",
    "Subscription",
    "SubscriptionKey",
    "SubscriptionTree",
    "delivery_options",
]
