"""Shared subscriptions: each publication to one member of a group.

Theory of operation
-------------------
A shared subscription (`$share/{name}/{filter}`, MQTT 5.0 §4.8.2; Mosquitto and EMQX take
it from 3.1.1 clients too) is a subscription like any other in the registry, of one
session, marked with its share name; the subscriptions with the same `$share/...` string at
one subscription point form a group. The registry lists the groups a topic matches
(`Registry.shared`); for each, `Shares.pick` chooses the member that gets the publication,
and `add_members` adds it to the router's targets. The choice:

- round robin among the members whose client is connected and reading;
- when none is, round robin among the persistent ones (the message waits in its queue);
- when none is persistent either, nobody (as for a QoS 0 message to an offline client).

When a member's connection ends, the QoS 1/2 messages it was given through the group and
has not acknowledged (queued, or sent and not acknowledged; a QoS 2 message whose PUBREC
came is the member's for good) go to another member that is connected (`reshare`); with
none connected they stay where they are. Retained messages are not sent to a shared
subscription (§4.8.2), and No Local is refused on one (a protocol error, §3.8.3.1).

`Shares` owns the round-robin positions; the deliveries it moves belong to their sessions
and are moved through `Deliveries`.
"""

from __future__ import annotations

import logging

from ...protocol.flows import InflightState
from ...subscriptions import (
    PERSISTENCE_RANK,
    DeliveryOptions,
    Registry,
    Subscription,
    delivery_options,
)
from .delivery import Deliveries
from .message import Delivery
from .session import Session

log = logging.getLogger("telemq.broker")
_PUBLISHED = InflightState.PUBLISHED


class Shares:
    """Member selection for shared subscription groups (see module docstring)."""

    def __init__(
        self,
        registry: Registry,
        sessions: dict[str, Session],
        deliveries: Deliveries,
    ) -> None:
        self._registry = registry
        self._sessions = sessions  # owned by the Sessions room: read only here
        self._deliveries = deliveries
        self._next: dict[str, int] = {}  # group -> round-robin position

    def pick(
        self, group: str, members: list[Subscription], exclude: str = ""
    ) -> Subscription | None:
        """The member of `group` that gets the next publication (see module docstring)."""
        count = len(members)
        start = self._next.get(group, 0)
        sessions = self._sessions
        fallback: Subscription | None = None
        for offset in range(count):
            member = members[(start + offset) % count]
            if member.queue == exclude:
                continue
            session = sessions.get(member.queue)
            if session is None:
                continue
            client = session.client
            if client is not None and client.writable:
                self._next[group] = (start + offset + 1) % count
                return member
            if fallback is None and (session.persistent or session.target is not None):
                fallback = member
        if fallback is not None:
            self._next[group] = (members.index(fallback) + 1) % count
        return fallback

    def add_members(
        self,
        groups: dict[str, list[Subscription]],
        targets: dict[str, tuple[int, int]],
        options5: dict[str, DeliveryOptions] | None,
    ) -> tuple[dict[str, tuple[int, int]], dict[str, DeliveryOptions] | None, dict[str, str]]:
        """One member per shared group a publication matches (`pick`), added to the router's
        targets: copies of the cached ones, with the member's options, and the group each
        queue was picked for. A member that also has its own matching subscription gets one
        copy (the highest QoS), as for two overlapping ones."""
        targets = dict(targets)
        options5 = dict(options5) if options5 is not None else {}
        picked: dict[str, str] = {}
        for group, members in groups.items():
            member = self.pick(group, members)
            if member is None:
                continue
            queue = member.queue
            entry = (member.qos, PERSISTENCE_RANK[member.persistence])
            current = targets.get(queue)
            targets[queue] = entry if current is None else max(current, entry)
            if queue not in options5 and member.has_options5:
                options5[queue] = delivery_options([member])
            picked[queue] = group
        return targets, options5 or None, picked

    def reshare(self, session: Session) -> int:
        """A member's connection ended: its unacknowledged group messages go to another
        connected member of their group; returns how many moved."""
        candidates: list[tuple[Delivery, int]] = [(d, 0) for d in session.queue if d.share]
        candidates += [(d, 0) for d in session.held if d.share]
        for packet_id, inflight in session.outbound.items():
            ref = inflight.ref
            if isinstance(ref, Delivery) and ref.share and inflight.state is _PUBLISHED:
                candidates.append((ref, packet_id))
        moved = 0
        for delivery, packet_id in candidates:
            members = self._registry.members(session.sub_point, delivery.share)
            member = self.pick(delivery.share, members, exclude=session.client_id)
            target = self._sessions.get(member.queue) if member is not None else None
            if member is None or target is None or target.client is None:
                continue  # nobody else is connected: it waits for this member
            if packet_id:
                del session.outbound[packet_id]
            else:
                self._deliveries.take_out(session, delivery)
            self._deliveries.forget(delivery)
            qos = min(delivery.qos, member.qos)
            copy = self._deliveries.enqueue(
                target,
                delivery.message,
                qos,
                delivery.retain,
                target.persistent and qos > 0,
                True,
                delivery.properties,
                delivery.share,
            )
            if copy is not None:
                self._deliveries.pump(target)
                moved += 1
        if moved:
            log.info(
                "client %r: %d messages of shared subscriptions moved to other members",
                session.client_id,
                moved,
            )
        return moved
