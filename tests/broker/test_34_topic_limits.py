"""Topic limits (docs/security.md "Limits"): levels and bytes of topic names and filters.

What a topic costs the broker grows with its levels (a 65,535-level filter cost 20 MB), so
`limits.max_topic_levels` (default 200, as Mosquitto) and `limits.max_topic_length` bound
them: a SUBSCRIBE filter beyond them gets 0x80, a PUBLISH or will beyond them closes its
connection (MQTT 3.1.1 has no other answer), an MQ command 3072; stored subscriptions and
retained messages beyond lowered limits are quarantined at restart, and come back when the
limits are raised again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .helpers import RawClient, Will, connect_packet, roundtrip, unique, write_config

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

FAILURE = 0x80


def limited(tmp_path: Path, levels: int, length: int = 65535) -> Path:
    text = f"[sys]\ninterval = 0\n[limits]\nmax_topic_levels = {levels}\n"
    text += f"max_topic_length = {length}\n"
    return write_config(tmp_path / "telemq.toml", text)


def deep(levels: int, prefix: str = "d") -> str:
    return "/".join([prefix, *["x"] * (levels - 1)])


def test_the_default_limit_is_200_levels_for_filters(broker_factory: Any) -> None:
    broker = broker_factory()
    with RawClient(broker.port) as client:
        assert client.connect(unique("deep")).return_code == 0
        # The filter: 65,535 levels in one SUBSCRIBE.
        codes = client.subscribe([(deep(200), 1), (deep(201), 1), ("/" * 65534, 0)])
        assert codes == [1, FAILURE, FAILURE]
        client.publish(deep(200), b"at the limit")
        assert client.expect_publish().payload == b"at the limit"
    assert "201 levels (limit 200)" in broker.log_text()


def test_filters_names_and_wills_beyond_the_limits(
    broker_factory: Any, paho_factory: Any, tmp_path: Path
) -> None:
    broker = broker_factory(config=limited(tmp_path, levels=8, length=64))
    bystander = paho_factory(broker.port)
    bystander.connect()
    with RawClient(broker.port) as client:
        assert client.connect(unique("lim")).return_code == 0
        codes = client.subscribe([("a/+/c/d/e/f/g/#", 1), ("a/b/c/d/e/f/g/h/#", 1), ("y" * 65, 1)])
        assert codes == [1, FAILURE, FAILURE]
        client.publish("a/b/c/d/e/f/g/h", b"eight levels")
        assert client.expect_publish().payload == b"eight levels"
        client.publish("a/b/c/d/e/f/g/h/i", b"nine levels", qos=1, complete=False)
        assert client.wait_closed(10.0), "a PUBLISH beyond the limit must close its connection"
    with RawClient(broker.port) as client:
        assert client.connect(unique("lim")).return_code == 0
        client.publish("z" * 65, b"too long", qos=0)
        assert client.wait_closed(10.0)
    with RawClient(broker.port) as client:
        client.send(connect_packet(unique("will"), will=Will(deep(9), b"w", 1, False)))
        assert client.wait_closed(10.0), "a will beyond the limits must close the connection"
    roundtrip(bystander)
    log = broker.log_text()
    assert "PUBLISH refused: topic has 9 levels (limit 8) [0x90 topic name invalid]" in log
    assert "PUBLISH refused: topic is 65 bytes long (limit 64)" in log
    assert "will refused: topic has 9 levels (limit 8)" in log


def test_beyond_lowered_limits_at_restart_is_quarantined_then_restored(
    broker_factory: Any, tmp_path: Path
) -> None:
    config = limited(tmp_path, levels=50)
    broker = broker_factory(config=config)
    client_id = unique("keep")
    topic = deep(30, "q")
    with RawClient(broker.port) as client:
        assert client.connect(client_id, clean=False).return_code == 0
        assert client.subscribe([(topic, 1), ("short/+", 1)]) == [1, 1]
        with RawClient(broker.port) as publisher:
            assert publisher.connect(unique("pub")).return_code == 0
            publisher.publish(topic, b"retained deep", qos=1, retain=True)
        assert client.collect(1)[0].payload == b"retained deep"  # and acknowledged
        client.disconnect()
    broker.stop()
    limited(tmp_path, levels=20)
    broker.start()
    log = broker.log_text()  # restored before the broker listens
    assert f"subscription of {client_id!r} to 'q/x/x" in log
    assert "retained message on 'q/x/x" in log and "30 levels (limit 20)" in log
    with RawClient(broker.port) as client:
        ack = client.connect(client_id, clean=False)
        assert (ack.session_present, ack.return_code) == (1, 0)
        # The rest of the session is there; the quarantined filter is not.
        client.publish("short/1", b"still subscribed")
        assert client.expect_publish().payload == b"still subscribed"
        client.disconnect()
    broker.stop()
    limited(tmp_path, levels=50)
    broker.start()
    with RawClient(broker.port) as client:
        ack = client.connect(client_id, clean=False)
        assert (ack.session_present, ack.return_code) == (1, 0)
        client.publish(topic, b"back again")
        assert client.expect_publish().payload == b"back again"
    with RawClient(broker.port) as client:
        assert client.connect(unique("late")).return_code == 0
        assert client.subscribe([(topic.replace("q/", "+/", 1), 0)]) == [0]
        retained = client.expect_publish()
        assert (retained.payload, retained.retain) == (b"retained deep", True)


def test_an_mq_command_beyond_the_limits_is_3072(broker_factory: Any, tmp_path: Path) -> None:
    broker = broker_factory(config=limited(tmp_path, levels=8))
    reply_topic = "SYSTEM.BROKER.RESPONSE/" + (client_id := unique("mq"))
    with RawClient(broker.port) as client:
        assert client.connect(client_id).return_code == 0
        assert client.subscribe([(reply_topic, 0)]) == [0]
        body = b'{"psc": {"Command": "RegSub", "Topic": ["a/b/c/d/e/f/g/h/i"]}}'
        client.publish("SYSTEM.BROKER.CONTROL.QUEUE", body)
        reply = client.expect_publish()
        assert b'"Reason": 3072' in reply.payload or b"3072" in reply.payload, reply.payload
        assert b"9 levels (limit 8)" in reply.payload
