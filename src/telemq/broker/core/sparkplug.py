"""Sparkplug awareness: the broker keeps the births of Sparkplug B edge nodes and devices.

Theory of operation
-------------------
The Sparkplug 3.0 specification (§10.1.4, "Sparkplug Aware MQTT Server") asks a broker to
store every NBIRTH and DBIRTH that passes through it and to make the most recent one of
each edge node and device available as a retained message on

    $sparkplug/certificates/spBv1.0/<group>/NBIRTH/<edge node>
    $sparkplug/certificates/spBv1.0/<group>/DBIRTH/<edge node>/<device>

so that a host application that connects late reads them at once instead of asking every
edge node for a rebirth. Edge nodes publish births without RETAIN; the broker treats them
as though it were set, on its own topic.

The router (router.py) asks here for every publication whose topic starts with `spBv1.0/`
(one `startswith` per publication; nothing else of the awareness is on the path of other
topics). `certificate_of` parses the topic and the payload (`telemq.sparkplug`): a BIRTH
that checks gives its certificate, a retained copy the router accepts after the birth
itself (not journaled: the birth is). A publication that is not Sparkplug B (a topic that
breaks the namespace, a payload that does not decode, a BIRTH without metrics' names or
datatypes or with an alias given twice, a STATE that is not the specification's JSON) is
routed as any MQTT message, never kept as a certificate, counted in
`BrokerStats.sparkplug_invalid` and logged (the first and every 1,000th).

A certificate is made at the broker the birth passed through and stays there: it is
`local_only` (never copied to linked brokers, which make their own from the births that
reach them). The `$sparkplug/` prefix is the broker's own (security/reserved.py): no client
publishes there, so a certificate always is what an edge node published.

The specification also lets the broker replace the timestamp of an NDEATH it publishes as
a will with the time it publishes it (the one the edge node put in its CONNECT is that of
the connection, not of the death): `will_payload` does so, keeping every other field.

Decoding needs protobuf (the `sparkplug` extra): without it `MISSING` says so, and the
wiring runs the broker unaware, with a warning.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Final

from .message import Message
from .stats import BrokerStats

try:  # telemq.sparkplug decodes with protobuf: the `sparkplug` extra
    from google.protobuf.message import DecodeError

    from ...sparkplug import (
        MessageType,
        SparkplugPayloadError,
        SparkplugTopicError,
        decode_payload,
        parse_topic,
    )
    from ...sparkplug.schema import PAYLOAD

    MISSING = ""
except ImportError as error:
    MISSING = f"{error} (telemq depends on protobuf: pip install 'protobuf>=5.28,<8')"

log = logging.getLogger("telemq.broker")

SPARKPLUG_PREFIX: Final = "spBv1.0/"  # the namespace of Sparkplug B, with its separator
CERTIFICATES: Final = "$sparkplug/certificates/"
LOG_EVERY: Final = 1000


class SparkplugAwareness:
    """Checks Sparkplug B publications and makes the certificates of births (see module
    docstring). Built by the wiring when `[sparkplug] aware` is on."""

    __slots__ = ("_stats",)

    def __init__(self, stats: BrokerStats) -> None:
        self._stats = stats

    def certificate_of(self, message: Message) -> Message | None:
        """The retained certificate of `message` (a publication under `spBv1.0/`) when it is
        a valid NBIRTH or DBIRTH; None for any other, counted when it is not Sparkplug B."""
        try:
            kind = parse_topic(message.topic).message_type
            check_payload(kind, message.payload)
        except (SparkplugTopicError, SparkplugPayloadError) as error:
            self._invalid(message, error.reason)
            return None
        except Exception:  # a decoder's bug must not stop the routing of what follows
            log.exception("checking the Sparkplug publication on %r failed", message.topic)
            self._invalid(message, "it could not be checked")
            return None
        if not kind.is_birth:
            return None
        certificate = Message(
            CERTIFICATES + message.topic,
            message.payload,
            message.qos,
            True,
            message.sub_point,
            "",
            "",
            message.ts_us,
        )
        certificate.properties = message.properties
        certificate.local_only = True
        return certificate

    def _invalid(self, message: Message, problem: str) -> None:
        stats = self._stats
        stats.sparkplug_invalid += 1
        if stats.sparkplug_invalid % LOG_EVERY == 1:
            log.warning(
                "client %r: %r is not Sparkplug B (%s): routed, not kept as a certificate"
                " (%d such publications so far)",
                message.client_id,
                message.topic,
                problem,
                stats.sparkplug_invalid,
            )

    @staticmethod
    def will_payload(topic: str, payload: bytes) -> bytes:
        """The payload of a will about to be published: an NDEATH's with its timestamp set
        to now (UTC milliseconds), everything else kept as sent; any other unchanged."""
        if not payload or not topic.startswith(SPARKPLUG_PREFIX):
            return payload  # nothing to stamp
        try:
            if parse_topic(topic).message_type is not MessageType.NDEATH:
                return payload
            decoded = PAYLOAD.FromString(payload)
        except (SparkplugTopicError, DecodeError):
            return payload  # not Sparkplug B: the router counts it
        decoded.timestamp = time.time_ns() // 1_000_000
        serialized: bytes = decoded.SerializeToString()
        return serialized


def check_payload(kind: MessageType, payload: bytes) -> None:
    """`SparkplugPayloadError` when `payload` is not what a `kind` message carries: a STATE
    the specification's JSON (§4.2.2: a boolean `online`, a numeric `timestamp`; empty
    clears a retained STATE), any other a Sparkplug B payload, a BIRTH a non-empty one
    whose metrics have names and datatypes and distinct aliases (`decode_payload`)."""
    if kind is MessageType.STATE:
        if payload:
            state_check(payload)
        return
    if kind.is_birth and not payload:
        raise SparkplugPayloadError(f"an empty {kind}")
    decode_payload(payload, kind)


def state_check(payload: bytes) -> None:
    try:
        state = json.loads(payload)
    except ValueError:  # bad UTF-8 or JSON
        raise SparkplugPayloadError("a STATE payload that is not UTF-8 JSON") from None
    if not isinstance(state, dict):
        raise SparkplugPayloadError("a STATE payload that is not a JSON object")
    if not isinstance(state.get("online"), bool):
        raise SparkplugPayloadError("a STATE payload without a boolean 'online'")
    timestamp = state.get("timestamp")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        raise SparkplugPayloadError("a STATE payload without a numeric 'timestamp'")
