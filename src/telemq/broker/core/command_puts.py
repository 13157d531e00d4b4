"""What the MQ commands put into the core: a Publish command's publication, and a put to one
queue.

Theory of operation
-------------------
The MQ command host (operations/mq.py) runs the commands published to `SYSTEM.BROKER.*`;
two of them make messages, on behalf of the client that sent the command (its `Requester`:
client id, user and subscription point):

- `publish_as` (Publish): a publication routed like the requester's own PUBLISH, through
  `Router.accept`: retained, journaled, routed; optionally with an expiry for its retained
  copy and kept from the other brokers of the network (PubOpt Local).
- `put_to_queue` (a backfill): one message on one queue only, not retained, journaled or
  routed. QoS 0 goes out only while the queue's client is connected and reading; QoS 1/2
  wait in the queue like any routed delivery (`Deliveries.enqueue`).

Neither is on the path of an ordinary message, so they live apart from the router; both
change state only through the rooms' methods (`CoreRooms`).
"""

from __future__ import annotations

import time

from ...commands import PutResult, Requester
from .message import Message
from .rooms import CoreRooms
from .router import now_us


def message_of(requester: Requester, topic: str, body: bytes, qos: int, retain: bool) -> Message:
    """A publication made by an MQ command on behalf of its requester."""
    return Message(
        topic,
        body,
        qos,
        retain,
        requester.sub_point,
        requester.client_id,
        requester.user_id,
        now_us(),
    )


def publish_as(
    rooms: CoreRooms,
    requester: Requester,
    topic: str,
    body: bytes,
    retain: bool,
    exclude_queue: str | None,
    expiry: float | None = None,
    local: bool = False,
) -> None:
    """A Publish command's publication, routed like the requester's own PUBLISH.

    `expiry` (seconds, from <mqmd><Expiry>) bounds the life of its retained copy;
    `local` (PubOpt Local) keeps it from the other brokers of the network.
    """
    message = message_of(requester, topic, body, requester.qos, retain)
    message.local_only = local
    if expiry is not None:
        message.expiry_at = time.time() + expiry
    rooms.stats.received_by_qos[message.qos] += 1
    rooms.router.accept(message, hand_off_now=True, exclude_queue=exclude_queue)
    rooms.committer.schedule()


def put_to_queue(
    rooms: CoreRooms, requester: Requester, queue: str, topic: str, body: bytes, qos: int
) -> PutResult:
    """Put one message on one queue only (a backfill): not retained, journaled or routed.

    QoS 0 goes out only while the queue's client is connected and reading (else
    NOT_CONNECTED, or FULL for a client that does not read); QoS 1/2 wait in the queue
    (in the store when the session is persistent) like any routed delivery.
    """
    session = rooms.sessions.by_id.get(queue)
    if session is None:
        return PutResult.NO_QUEUE
    message = message_of(requester, topic, body, qos, False)
    deliveries = rooms.deliveries
    if qos == 0:
        client = session.client
        if client is None:
            return PutResult.NOT_CONNECTED
        return PutResult.PUT if deliveries.send_qos0(client, message, False) else PutResult.FULL
    if deliveries.enqueue(session, message, qos, False, session.persistent) is None:
        return PutResult.FULL
    deliveries.pump(session)
    rooms.committer.schedule()
    return PutResult.PUT
