"""Subscriptions, MQTT and MQ alike: the registry, identities, options and the topic trie.

Pure data and policy, no I/O. See `subscription` and `registry` for the theory of operation.
"""

from .options5 import DeliveryOptions, delivery_options, filter_properties
from .registry import Registry, Route
from .subscription import (
    BRIDGE_QUEUE_PREFIX,
    LINK_QUEUE_PREFIX,
    PERSISTENCE_RANK,
    REMOTE_QUEUE_PREFIX,
    RESERVED_QUEUE_PREFIXES,
    STORED_OPTIONS,
    Identity,
    Persistence,
    Subscription,
    SubscriptionKey,
)
from .topic_tree import SubscriptionTree

__all__ = [
    "BRIDGE_QUEUE_PREFIX",
    "LINK_QUEUE_PREFIX",
    "PERSISTENCE_RANK",
    "REMOTE_QUEUE_PREFIX",
    "RESERVED_QUEUE_PREFIXES",
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
