"""Subscriptions, MQTT and MQ alike: the registry, identities, options and the topic trie.

Pure data and policy, no I/O. See `registry` for the theory of operation.
"""

from .options5 import DeliveryOptions, delivery_options, filter_properties
from .registry import (
    LINK_QUEUE_PREFIX,
    PERSISTENCE_RANK,
    STORED_OPTIONS,
    Identity,
    Persistence,
    Registry,
    Route,
    Subscription,
    SubscriptionKey,
)
from .topic_tree import SubscriptionTree

__all__ = [
    "LINK_QUEUE_PREFIX",
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
    "filter_properties",
]
