"""What a delivery carries beyond the message: MQTT 5.0 options, MQ's CorrelId, and what
content filters see of a message's 5.0 properties.

Theory of operation
-------------------
The registry delivers one copy of a publication per queue (design §5), so what the
subscriptions of one queue add to that copy is merged over those that match the topic
(`delivery_options`), once per cached route:

- No Local holds only if every one has it; Retain As Published if any has it;
- their Subscription Identifiers all go with the copy;
- an MQ subscription registered with CorrelAsId gives the copy its CorrelId as MQTT 5.0
  Correlation Data (MQ sets the delivered message's CorrelId); with several such
  subscriptions matching, the oldest one's. The Correlation Data is written first among
  the copy's own properties (`DeliveryOptions.properties`), which tells the sender to drop
  the message's own (a PUBLISH carries one at most).

Content filters read `Properties.ContentType` and `Properties.User.<name>` from a message's
5.0 properties: `filter_properties` decodes them only for a message that has properties,
and only when a filtered subscription is evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..protocol.properties import (
    PropertyError,
    correlation_data_property,
    read_message_properties,
    subscription_identifier_property,
)

if TYPE_CHECKING:
    from .subscription import Subscription


@dataclass(slots=True)
class DeliveryOptions:
    """What the subscriptions of one queue add to a delivery of one topic (see module
    docstring): `no_local` and `retain_as_published` decide whether and how it goes;
    `properties` are its own 5.0 properties, encoded (Correlation Data first, then the
    Subscription Identifiers)."""

    no_local: bool
    retain_as_published: bool
    properties: bytes


def correlation_id(subscription: Subscription) -> str:
    """The CorrelId a delivery for `subscription` carries ("" for none): MQ's CorrelAsId."""
    identity = subscription.identity
    return identity.correl_id if "CorrelAsId" in subscription.options else ""


def options5_of_queues(matching: list[Subscription]) -> dict[str, DeliveryOptions] | None:
    """The `DeliveryOptions` of the queues among `matching` (the subscriptions matching one
    topic) that have a subscription with options; None when none has."""
    queues = {s.queue for s in matching if s.has_options5}
    if not queues:
        return None
    return {queue: delivery_options([s for s in matching if s.queue == queue]) for queue in queues}


def delivery_options(mine: list[Subscription]) -> DeliveryOptions:
    """The options of a delivery made for `mine`, subscriptions of one queue."""
    ids = sorted({s.subscription_id for s in mine if s.subscription_id})
    properties = b"".join(subscription_identifier_property(i) for i in ids)
    correlated = sorted((s.id, correlation_id(s)) for s in mine if correlation_id(s))
    if correlated:
        properties = correlation_data_property(bytes.fromhex(correlated[0][1])) + properties
    return DeliveryOptions(
        all(s.no_local for s in mine),
        any(s.retain_as_published for s in mine),
        properties,
    )


def filter_properties(properties: bytes) -> dict[str, str]:
    """What content filters see of a message's 5.0 properties (docs/filters.md):
    `ContentType`, and `User.<name>` for each user property (the first value of a repeated
    name). Empty for a message without properties, and for bytes that do not decode."""
    if not properties:
        return {}
    try:
        props = read_message_properties(properties)
    except PropertyError:
        return {}
    view: dict[str, str] = {}
    if props.content_type is not None:
        view["ContentType"] = props.content_type
    for name, value in props.user_properties:
        view.setdefault("User." + name, value)
    return view
