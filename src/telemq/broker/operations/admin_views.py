"""The admin API's JSON shapes (admin_api.py): what an administrator sees of a client, a
session, a subscription and a retained message.

One function per shape, reading the objects the rooms own and changing nothing; the fields
are the ones `openapi.json` documents. Times are ISO-8601 UTC to the millisecond (the format
`telemq subs list` prints), or null for "never". MQ names keep the MQ spelling in their values
(`PersAsPub`, the option names of RegSub) so they read as in the IBM documentation.
"""

from __future__ import annotations

import base64
import datetime
from typing import TYPE_CHECKING, Any

from ...protocol.peer5 import NO_EXPIRY
from ...subscriptions import LINK_QUEUE_PREFIX, Registry, Subscription
from ..edges.websockets import WebSocketTransport

if TYPE_CHECKING:
    from ..core.message import Message
    from ..core.session import Client, Session

PROTOCOLS = {3: "3.1", 4: "3.1.1", 5: "5"}


def iso_time(seconds: float | None) -> str | None:
    """UTC seconds as `2026-11-25T21:58:03.512Z`; None (and 0: not set) as None."""
    if not seconds:
        return None
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def client_json(client: Client, registry: Registry) -> dict[str, Any]:
    connection = client.connection
    session = client.session
    level = connection.protocol_level if connection is not None else 4
    tls = bool(client.listener.certfile)
    websocket = isinstance(client.transport, WebSocketTransport)
    throttling = client.throttling  # none for a client never held or paused
    return {
        "client_id": client.client_id,
        "user": client.user_id,
        "peer": client.peer,
        "protocol": PROTOCOLS.get(level, str(level)),
        "transport": ("ws" if websocket else "tcp") if not tls else ("wss" if websocket else "tls"),
        "connected_at": iso_time(client.connected_at),
        "keepalive": connection.keepalive if connection is not None else 0,
        "persistent": session is not None and session.persistent,
        "subscriptions": registry.count_of_queue(client.client_id),
        "queued": 0 if session is None else len(session.queue),
        "inflight": 0 if session is None else len(session.outbound),
        "reads_held": throttling.reads_held if throttling is not None else 0,
        "store_pauses": throttling.store_pauses if throttling is not None else 0,
    }


def session_json(session: Session, registry: Registry) -> dict[str, Any]:
    expires = session.expires_at if session.expiry_interval != NO_EXPIRY else None
    # A session the store keeps knows when it was made; a clean one began with its client.
    created = session.created_us / 1e6 or (session.client.connected_at if session.client else 0)
    return {
        "client_id": session.client_id,
        "user": session.user_id,
        "connected": session.client is not None,
        "persistent": session.persistent,
        "created_at": iso_time(created),
        "expires_at": iso_time(expires),
        "subscriptions": registry.count_of_queue(session.client_id),
        "queued": len(session.queue),
        "inflight": len(session.outbound),
    }


def subscription_json(subscription: Subscription) -> dict[str, Any]:
    identity = subscription.identity
    if subscription.share_name:
        kind = "shared"
    elif identity.queue.startswith(LINK_QUEUE_PREFIX):
        kind = "link"
    elif subscription.mqtt:
        kind = "mqtt"
    else:
        kind = "mq"
    return {
        "id": subscription.id,
        "topic": subscription.topic,
        "sub_point": subscription.sub_point,
        "queue": identity.queue,
        "qmgr": identity.qmgr,
        "owner": subscription.owner,
        "qos": subscription.qos,
        "kind": kind,
        "name": subscription.name,
        "user_data": subscription.user_data,
        "identities": [
            {"name": name, "exclusive": exclusive}
            for name, exclusive in sorted(subscription.members.items())
        ],
        "options": sorted(subscription.options),
        "persistence": str(subscription.persistence),
        "filter": subscription.filter_text,
        "correl_id": identity.correl_id,
        "created_at": iso_time(subscription.created_at),
        "expires_at": iso_time(subscription.expiry_at),
    }


def retained_json(message: Message) -> dict[str, Any]:
    return {
        "topic": message.topic,
        "sub_point": message.sub_point,
        "qos": message.qos,
        "size": len(message.payload),
        "payload": message.payload.decode("utf-8", errors="replace"),
        "payload_base64": base64.b64encode(message.payload).decode("ascii"),
        "published_at": iso_time(message.ts_us / 1e6),
        "expires_at": iso_time(message.expiry_at),
    }
