"""Arrivals over links: the publications neighbours send, their envelope taken off.

Theory of operation
-------------------
Every copy of a publication that crosses a link carries an envelope (network/envelope.py):
telemq-* user properties naming the path it took, the subscription point it was made at,
whether it is a retained answer (`sync`), and, for a copy bound for a queue on another
broker, that queue (`to`). What arrives on a link's connection comes here, from the links
room's handler table (links.py):

- on `$link/control`, a control message: applied by the control side (link_control.py),
  acknowledged once applied when it came stored (QoS 1, a DeletePub);
- QoS 0/1: the envelope is opened at once (`_open_envelope`) and the message goes to the
  router (`Router.on_link_publish`: never back to the link it came by), or, for a queue, to
  remote_queues.py, which puts it there or passes it on;
- QoS 2: held as it came, envelope included, and opened at PUBREL (`on_release`), so that a
  restart in between finds the path in the stored message.

Opening an envelope drops a copy that has been here before (a loop: logged once per link),
and a retained answer this broker already holds (retained_sync.py, `is_news`); it gives the
message the rest of its properties, its subscription point when this broker declares it,
its origin and publisher (client id and user id, for filters and the journal), and the
envelope its copies to further links carry. The same few paths and publishers come again
and again, so that envelope onward is cached per (path, sub point, sync tag, publisher):
the `_onward` cache is the only state this class owns.
"""

from __future__ import annotations

import logging

from ...network.control import CONTROL_TOPIC
from ...network.envelope import LinkInfo, extend, loops, sealed_envelope, split_user_properties
from ...protocol import MessageReceived, MessageReleased, PacketType, Properties
from ...protocol.properties import read_message_properties
from ..core.message import Message
from ..core.rooms import CoreRooms
from ..core.router import now_us
from ..core.session import Client
from ..core.sessions import LINK_PREFIX
from .link_control import LinkControl, LinkState
from .remote_queues import RemoteQueues
from .retained_sync import RetainedSync

log = logging.getLogger("telemq.broker")

ONWARD_CACHE = 4096  # entries of `Arrivals._onward`


class Arrivals:
    """What neighbours send over links (see module docstring)."""

    def __init__(
        self,
        own: str,
        links: dict[str, LinkState],
        rooms: CoreRooms,
        control: LinkControl,
        retained_sync: RetainedSync,
        remote_queues: RemoteQueues,
    ) -> None:
        self._own = own
        self._links = links  # the links room's
        self._rooms = rooms
        self._control = control
        self._retained_sync = retained_sync
        self._remote_queues = remote_queues
        # (path, sub point, sync tag, client id, user id) of arriving copies -> the envelope
        # of their copies onward: the same few paths and publishers come again and again.
        self._onward: dict[tuple[tuple[str, ...], str, str, str, str], bytes] = {}

    def on_publish(self, client: Client, event: MessageReceived) -> None:
        """A PUBLISH on a link: a control message, or a copy to open and route."""
        publish = event.publish
        if publish.topic == CONTROL_TOPIC:
            self._control.received(client, publish.payload)
            if publish.qos == 1:  # a stored one (delete-retained): acknowledged once applied
                packet_id = publish.packet_id
                committer = self._rooms.committer
                committer.after(lambda: client.acknowledge(PacketType.PUBACK, packet_id))
                committer.schedule()
            return
        link = self._links[client.client_id[len(LINK_PREFIX) :]]
        link.messages_received += 1
        props = publish.properties
        message = Message(
            publish.topic, publish.payload, publish.qos, publish.retain, "", "", "", now_us()
        )
        deliver = None
        if publish.qos == 2:
            # Held as it came, envelope included, and opened at PUBREL (`on_release`), so
            # that a restart in between finds the path in the stored message.
            if props is not None:
                message.take_properties(props)
        else:
            info = self._open_envelope(link, props, message)
            if info is None:
                if publish.qos == 1:  # dropped (a loop): acknowledged, or it comes again
                    client.acknowledge(PacketType.PUBACK, publish.packet_id)
                return
            if info.to:  # for a queue (remote_queues.py): put there or passed on
                deliver = self._remote_queues.deliver_for(info)
        self._rooms.router.on_link_publish(client, event, message, deliver)

    def on_release(self, client: Client, event: MessageReleased) -> None:
        """A QoS 2 copy's PUBREL: its envelope is opened now (see `on_publish`)."""
        link = self._links[client.client_id[len(LINK_PREFIX) :]]
        message = event.message
        route = True
        deliver = None
        if isinstance(message, Message):
            props = read_message_properties(message.properties) if message.properties else None
            info = self._open_envelope(link, props, message)
            route = info is not None
            if info is not None and info.to:
                deliver = self._remote_queues.deliver_for(info)
        self._rooms.router.release(client, event, client.client_id, route, deliver)

    def _open_envelope(
        self, link: LinkState, props: Properties | None, message: Message
    ) -> LinkInfo | None:
        """Take the envelope off the properties of a copy that came over `link` (`props`,
        as decoded) and give `message` the rest, its sub point, and the envelope its copies
        to further links carry; the envelope is returned. None when the copy has been here
        before (a loop: dropped, logged once per link), or is a retained answer this broker
        already holds. A copy for a queue (`telemq-to`) is not routed: remote_queues.py
        makes its envelope onward."""
        pairs = props.user_properties if props is not None else []
        try:
            info, rest = split_user_properties(pairs)
        except ValueError as error:
            log.error(
                "link %r: a publication with an invalid envelope: %s", link.config.name, error
            )
            info, rest = None, pairs
        if info is None:
            info = LinkInfo((link.config.name,))
        if info.to:
            if loops(info, self._own):
                log.error(
                    "link %r: a publication for queue %s came back (path %s): dropped",
                    link.config.name,
                    info.to,
                    ",".join(info.path),
                )
                return None
            if props is not None:
                props.user_properties = rest
                message.take_properties(props)
            message.origin = info.path[0]
            message.client_id = info.client_id
            message.user_id = info.user_id
            return info
        key = (info.path, info.sub_point, info.sync, info.client_id, info.user_id)
        onward = self._onward.get(key)
        if onward is None:
            if loops(info, self._own):
                if not link.loops_logged:
                    link.loops_logged = True
                    log.error(
                        "link %r: a publication came back (path %s): dropped; the links form "
                        "a cycle",
                        link.config.name,
                        ",".join(info.path),
                    )
                return None
            if len(self._onward) >= ONWARD_CACHE:
                self._onward.clear()
            onward = self._onward[key] = sealed_envelope(extend(info, self._own))
        if props is not None:
            props.user_properties = rest
            message.take_properties(props)
        if info.sub_point and info.sub_point in self._rooms.sub_points:
            message.sub_point = info.sub_point
        message.net = onward
        message.origin = info.path[0]
        message.client_id = info.client_id
        message.user_id = info.user_id
        if info.sync:  # a retained answer: passed on only if it is news here
            message.sync = True
            if not self._retained_sync.is_news(message):
                return None
        return info
