"""QoS 2 releases: what a PUBREL makes durable, and when PUBCOMP and the copies go out.

Theory of operation
-------------------
A QoS 2 publication is held, stored, from its PUBLISH (PUBREC after that commit) until its
PUBREL (`Router.release`), when it is journaled and routed in one transaction. This module
is the bookkeeping around that transaction, for the router and the restore:

- `record_release`: the held message leaves the store in the release's commit. A persistent
  session keeps its id instead, marked released (`remember_release`, `Flows.released`): a
  client may lose the PUBCOMP with its connection and re-send the PUBLISH rather than the
  PUBREL, and must not have it routed twice. The oldest remembered id makes room, and leaves
  the store too.
- `complete_release`: the release is durable once its commit ends. Until then a crash leaves
  the stored message unreleased, and it is released again (at restart for a clean
  publisher, on the PUBREL it re-sends for a persistent one): a persistent subscriber gets
  its copy, and a persistent publisher its PUBCOMP, after that commit. Clean sessions do not
  wait for it (their state ends with a crash, so nobody gets the message twice and the
  journal has it once); that commit then comes within `RELEASE_COMMIT_WITHIN` seconds, or
  with the next one.

Plain functions over the rooms they are given: the state they change is the sessions'
flows, the pending write batch (`Committer`) and the deliveries (`Deliveries`).
"""

from __future__ import annotations

from ...protocol import PacketType
from ...protocol.flows import release_digest
from ...store import Op
from .committer import Committer
from .delivery import Deliveries
from .message import Delivery, Message
from .session import Client, Session

# Seconds within which a clean session's QoS 2 release (its journal row) is committed when
# nothing waits for it: soon, and usually sooner with the next publication's commit.
RELEASE_COMMIT_WITHIN = 0.002


def record_release(
    committer: Committer, session: Session, packet_id: int, message: Message
) -> None:
    """The held message leaves the store in the release's commit. A persistent session
    keeps its id, marked released, instead: the client may lose the PUBCOMP with its
    connection, and re-send the PUBLISH rather than the PUBREL (`Flows.released`)."""
    pending = committer.pending
    if not session.persistent:  # WriteBatch.delete_incoming, inlined: once per release
        pending.ops.append((Op.DELETE_INCOMING, (session.client_id, packet_id)))
        return
    pending.release_incoming(session.client_id, packet_id)
    digest = release_digest(message.topic_bytes, message.payload, message.retain)
    remember_release(committer, session, packet_id, digest, session.connection_number)


def remember_release(
    committer: Committer, session: Session, packet_id: int, digest: int, connection_number: int
) -> None:
    """Into the session's released ids; the one that makes room leaves the store too."""
    forgotten = session.remember_released(packet_id, digest, connection_number)
    if forgotten:
        committer.pending.delete_incoming(session.client_id, forgotten)
        committer.schedule()


def complete_release(
    committer: Committer,
    deliveries: Deliveries,
    client: Client,
    session: Session,
    packet_id: int,
    hand_offs: list[tuple[Session, Delivery]],
) -> None:
    """The copies of a release (`hand_offs`, from `Router.accept`) and its PUBCOMP: at once
    for clean sessions, after the release's commit for persistent ones."""
    # The release is durable once this commit ends. Until then a crash leaves the stored
    # message unreleased, and it is released again (at restart for a clean publisher, on
    # the PUBREL it re-sends for a persistent one): a persistent subscriber must not have
    # had it yet, or it would get it twice. A clean one may: its session ends with the
    # crash. Likewise only a persistent publisher must wait for PUBCOMP: a clean one's
    # held message is released at restart.
    waiting: list[tuple[Session, Delivery]] = []
    for target, delivery in hand_offs:
        if target.persistent:
            waiting.append((target, delivery))
        else:
            deliveries.hand_off(target, delivery)
    if session.persistent:

        def after_commit() -> None:
            deliveries.hand_off_all(waiting)
            client.acknowledge(PacketType.PUBCOMP, packet_id)

        committer.after(after_commit)
    else:
        client.acknowledge(PacketType.PUBCOMP, packet_id)
        if waiting:
            committer.after(lambda: deliveries.hand_off_all(waiting))
        else:
            committer.schedule_lazy(RELEASE_COMMIT_WITHIN)
