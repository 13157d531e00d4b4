"""The Sparkplug topic namespace (specification chapter 4), parsed without I/O.

Every Sparkplug topic starts with the namespace ``spBv1.0``. An edge node's and a device's
messages are ``spBv1.0/<group>/<type>/<edge node>`` (NBIRTH, NDATA, NDEATH, NCMD) and
``spBv1.0/<group>/<type>/<edge node>/<device>`` (DBIRTH, DDATA, DDEATH, DCMD); a host
application's is ``spBv1.0/STATE/<host id>``. Each element is a non-empty UTF-8 string
without ``/``, ``+`` or ``#``.

`parse_topic` returns a `SparkplugTopic` or raises `SparkplugTopicError` whose `reason` says
what breaks the form; `is_sparkplug_topic` says whether a topic is in the namespace at all
(a topic outside it is not Sparkplug, which is not an error).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

NAMESPACE = "spBv1.0"


class MessageType(StrEnum):
    NBIRTH = "NBIRTH"
    NDATA = "NDATA"
    NDEATH = "NDEATH"
    NCMD = "NCMD"
    DBIRTH = "DBIRTH"
    DDATA = "DDATA"
    DDEATH = "DDEATH"
    DCMD = "DCMD"
    STATE = "STATE"

    @property
    def is_birth(self) -> bool:
        return self in (MessageType.NBIRTH, MessageType.DBIRTH)

    @property
    def is_death(self) -> bool:
        return self in (MessageType.NDEATH, MessageType.DDEATH)

    @property
    def is_device(self) -> bool:
        return self.value.startswith("D")


NODE_TYPES = frozenset(
    {MessageType.NBIRTH, MessageType.NDATA, MessageType.NDEATH, MessageType.NCMD}
)
DEVICE_TYPES = frozenset(
    {MessageType.DBIRTH, MessageType.DDATA, MessageType.DDEATH, MessageType.DCMD}
)


class SparkplugTopicError(ValueError):
    """A topic in the ``spBv1.0`` namespace that breaks its form; `reason` says how."""

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"not a Sparkplug topic: {reason} ({topic!r})")
        self.topic = topic
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SparkplugTopic:
    """One parsed topic: `group` and `edge_node` for edge node and device messages,
    `device` for device messages only, `host_id` for STATE only."""

    message_type: MessageType
    group: str | None = None
    edge_node: str | None = None
    device: str | None = None
    host_id: str | None = None

    def __str__(self) -> str:
        if self.message_type is MessageType.STATE:
            return f"{NAMESPACE}/STATE/{self.host_id}"
        tail = f"/{self.device}" if self.device is not None else ""
        return f"{NAMESPACE}/{self.group}/{self.message_type}/{self.edge_node}{tail}"


def is_sparkplug_topic(topic: str) -> bool:
    """Whether `topic` is in the Sparkplug B namespace (well formed or not)."""
    return topic == NAMESPACE or topic.startswith(NAMESPACE + "/")


def parse_topic(topic: str) -> SparkplugTopic:
    """The parts of a Sparkplug B topic; `SparkplugTopicError` names what is wrong."""
    levels = topic.split("/")
    if levels[0] != NAMESPACE:
        raise SparkplugTopicError(topic, f"the namespace is not {NAMESPACE}")
    for index, level in enumerate(levels[1:], start=1):
        if not level:
            raise SparkplugTopicError(topic, f"level {index} is empty")
        if "+" in level or "#" in level:
            raise SparkplugTopicError(topic, f"level {index} holds a wildcard character")
    if len(levels) >= 2 and levels[1] == "STATE":
        if len(levels) != 3:
            raise SparkplugTopicError(topic, "a STATE topic is spBv1.0/STATE/<host id>")
        return SparkplugTopic(MessageType.STATE, host_id=levels[2])
    if len(levels) < 4:
        raise SparkplugTopicError(topic, "too few levels for <group>/<type>/<edge node>")
    try:
        message_type = MessageType(levels[2])
    except ValueError:
        raise SparkplugTopicError(topic, f"unknown message type {levels[2]!r}") from None
    if message_type is MessageType.STATE:
        raise SparkplugTopicError(topic, "a STATE topic is spBv1.0/STATE/<host id>")
    if message_type in NODE_TYPES and len(levels) != 4:
        raise SparkplugTopicError(topic, f"{message_type} takes no device level")
    if message_type in DEVICE_TYPES and len(levels) != 5:
        raise SparkplugTopicError(topic, f"{message_type} needs exactly one device level")
    return SparkplugTopic(
        message_type,
        group=levels[1],
        edge_node=levels[3],
        device=levels[4] if len(levels) == 5 else None,
    )
