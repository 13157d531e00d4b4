"""The broker's own topics (`$SYS/`, `$link/`, `$bridge/`, `$remote/`, `$share/`,
`$sparkplug/`) over real sockets: a client's PUBLISH, will or retained message there is
refused for every user, administrators included, and counted; MQ commands cannot write
there either; a bridge may still announce its own state (docs/security.md, "The broker's
own topics")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mq.helpers import assert_warning, connected
from telemq.protocol import PubAck, PubComp, Publish, PubRec, PubRel
from telemq.protocol import Will as Will5
from telemq.store.sqlite import open_journal_reader
from testsupport.paho import sys_value
from testsupport.process import users_and_acl
from testsupport.raw5 import Raw5Factory

from .helpers import (
    BrokerProcess,
    PahoClient,
    RawClient,
    Will,
    mosquitto_pub,
    unique,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

BrokerFactory = Callable[..., BrokerProcess]
PahoFactory = Callable[..., PahoClient]

DENIED = "$SYS/broker/publish/messages/denied"
CONNECTED = "$SYS/broker/clients/connected"
NOT_AUTHORIZED = 0x87
NOT_AUTHORIZED_CONNACK = 5
MQ_NOT_AUTHORIZED = 3081
RESERVED = [
    "$SYS/broker/clients/connected",
    "$SYS",
    "$link/control",
    "$bridge/cloud/x",
    "$remote/QM2/queue",
    "$share/group/a",
    "$sparkplug/certificates/spBv1.0/G/NBIRTH/E",
]
ADMIN = ("alice", "alice-pw")
# alice is an administrator whose rules would allow anything, $SYS included.
ACL = [("alice", "all", "#", True), ("alice", "all", "$SYS/#", True)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """An open broker (no users, no ACL: nothing else refuses anything), $SYS every 0.3 s."""
    workdir = tmp_path_factory.mktemp("reserved")
    config = write_config(workdir / "telemq.toml", "[sys]\ninterval = 0.3\n")
    process = BrokerProcess(workdir / "broker", config=config).start()
    yield process
    process.finalize()


def denied(port: int) -> int:
    value = sys_value(port, DENIED)
    assert value is not None
    return int(value)


def denied_reaches(port: int, count: int) -> bool:
    """True once `$SYS` says at least `count` publications were denied."""
    value = sys_value(port, DENIED, 3.0, until=lambda v: int(v) >= count)
    return value is not None and int(value) >= count


def journal_topics(broker: BrokerProcess) -> list[str]:
    reader = open_journal_reader(broker.data_dir)
    try:
        return [row[0] for row in reader.execute("SELECT topic FROM journal ORDER BY seq")]
    finally:
        reader.close()


def test_mosquitto_pub_cannot_feed_sys_false_numbers(
    broker: BrokerProcess, paho_client: PahoFactory
) -> None:
    """The issue's report: an anonymous `mosquitto_pub -q 1` into `$SYS` was acknowledged
    and reached every `$SYS` subscriber. It is still acknowledged (MQTT 3.1.1 has no way to
    refuse), but dropped and counted."""
    watcher = paho_client(broker.port)
    watcher.subscribe("$SYS/#", qos=1)
    before = denied(broker.port)
    mosquitto_pub(broker.port, "-t", CONNECTED, "-m", "9999", "-q", "1")
    mosquitto_pub(broker.port, "-t", CONNECTED, "-m", "9999", "-q", "1", "-r")
    assert denied_reaches(broker.port, before + 2)
    # The counter's refresh came after both publications: had they been routed, the
    # watcher would hold them now.
    assert wait_until(lambda: bool(watcher.received(DENIED)), 5.0)
    assert [m for m in watcher.received(CONNECTED) if m.payload == b"9999"] == []
    # The retained value is still the broker's own.
    late = sys_value(broker.port, CONNECTED)
    assert late is not None and late != "9999"


@pytest.mark.parametrize("topic", RESERVED)
def test_mqtt5_refuses_reserved_topics_with_0x87(
    broker: BrokerProcess, raw5: Raw5Factory, topic: str
) -> None:
    client = raw5(broker.port)
    client.connect(unique("v5"))
    before = denied(broker.port)
    client.send(Publish(topic, b"9999", qos=1, packet_id=1))
    assert client.recv() == PubAck(1, NOT_AUTHORIZED)
    client.send(Publish(topic, b"9999", qos=2, packet_id=2, retain=True))
    assert client.recv() == PubRec(2, NOT_AUTHORIZED)
    client.send(Publish(topic, b"9999", qos=0))
    # The connection stays: an ordinary publication is acknowledged as usual after them.
    client.send(Publish(unique("ordinary/"), b"x", qos=2, packet_id=3))
    assert client.recv() == PubRec(3)
    client.send(PubRel(3))
    assert client.recv() == PubComp(3)
    assert denied_reaches(broker.port, before + 3)
    assert topic not in journal_topics(broker)


@pytest.mark.parametrize("topic", RESERVED)
def test_mqtt311_drops_reserved_topics_and_journals_nothing(
    broker: BrokerProcess, raw_factory: Callable[..., RawClient], topic: str
) -> None:
    client = raw_factory(broker.port, connected=True, client_id=unique("v311"))
    before = denied(broker.port)
    client.publish(topic, b"9999", qos=1)  # PUBACK as usual
    client.publish(topic, b"9999", qos=2, retain=True)  # PUBREC, PUBREL, PUBCOMP
    sync_topic = unique("ordinary/")
    client.publish(sync_topic, b"x", qos=1)
    assert denied_reaches(broker.port, before + 2)
    journaled = journal_topics(broker)
    assert sync_topic in journaled and topic not in journaled


def test_no_retained_message_is_made_in_sys(
    broker: BrokerProcess, paho_client: PahoFactory
) -> None:
    forged = f"$SYS/broker/{unique('forged')}"
    paho_client(broker.port).publish(forged, b"1", qos=1, retain=True)
    assert sys_value(broker.port, forged, 1.5) is None


def test_wills_on_reserved_topics_are_refused_at_connect(
    broker: BrokerProcess, raw5: Raw5Factory
) -> None:
    before = denied(broker.port)
    for topic in ("$SYS/broker/clients/connected", "$link/control", "$share/g/a"):
        ack311 = RawClient(broker.port)
        try:
            code = ack311.connect(unique("w311"), will=Will(topic, b"0", 1, True)).return_code
        finally:
            ack311.close()
        assert code == NOT_AUTHORIZED_CONNACK, topic
        ack5 = raw5(broker.port).connect(unique("w5"), will=Will5(topic, b"0", 1, True))
        assert ack5.return_code == NOT_AUTHORIZED, topic
        assert ack5.properties is not None and "will" in (ack5.properties.reason_string or "")
    assert denied_reaches(broker.port, before + 6)


def test_a_bridge_announces_its_own_state(broker: BrokerProcess, paho_client: PahoFactory) -> None:
    """Mosquitto's bridge notifications: retained `1` on
    `$SYS/broker/connection/<client id>/state`, `0` in the will; only for its own client id."""
    client_id = unique("edge.")
    state = f"$SYS/broker/connection/{client_id}/state"
    watcher = paho_client(broker.port)
    watcher.subscribe("$SYS/broker/connection/#", qos=1)
    bridge = RawClient(broker.port)
    try:
        assert bridge.connect(client_id, will=Will(state, b"0", 1, True)).return_code == 0
        bridge.publish(state, b"1", qos=1, retain=True)
        assert [m.payload for m in watcher.wait_messages(1, topic=state)] == [b"1"]
        assert sys_value(broker.port, state) == "1"
        other = paho_client(broker.port)
        other.publish(state, b"0", qos=1, retain=True)  # not its own client id: dropped
        other.publish(f"$SYS/broker/connection/{other.client_id}/other", b"0", qos=1)
    finally:
        bridge.close()  # no DISCONNECT: its will says 0
    assert wait_until(lambda: [m.payload for m in watcher.received(state)] == [b"1", b"0"], 5.0)
    assert len(watcher.received()) == 2


def test_admins_may_read_sys_but_not_write_it(
    broker_factory: BrokerFactory, tmp_path: Path, paho_factory: PahoFactory
) -> None:
    text = "[sys]\ninterval = 0.3\n" + users_and_acl({ADMIN[0]: ADMIN[1]}, ACL, [ADMIN[0]])
    admin_broker = broker_factory(config=write_config(tmp_path / "admin.toml", text))
    alice = paho_factory(admin_broker.port, username=ADMIN[0], password=ADMIN[1])
    alice.connect()
    assert alice.subscribe([(CONNECTED, 1), (DENIED, 1)]) == [1, 1]
    assert alice.wait_messages(1, topic=CONNECTED)[0].payload.isdigit()
    alice.publish(CONNECTED, b"9999", qos=1, retain=True)
    assert wait_until(lambda: b"1" in [m.payload for m in alice.received(DENIED)], 5.0)
    assert wait_until(lambda: len(alice.received(CONNECTED)) >= 3, 5.0)  # refreshes came
    assert b"9999" not in [m.payload for m in alice.received(CONNECTED)]


def test_mq_commands_cannot_write_into_sys(broker: BrokerProcess) -> None:
    """A Publish command's topic, a DeletePub's and a reply topic (ReplyToQ) are publish
    checks: `$SYS/` is refused there too (3081)."""
    client = connected(broker.port)
    assert client.subscribe(CONNECTED, qos=1) == [1]
    reply = client.command(
        {"Command": "Publish", "Topic": [CONNECTED, f"$SYS/broker/{unique('x')}"]},
        body=b"9999",
        form="json",
    )
    assert_warning(reply, MQ_NOT_AUTHORIZED, MQ_NOT_AUTHORIZED)
    reply = client.command({"Command": "DeletePub", "Topic": [CONNECTED]}, form="json")
    assert_warning(reply, MQ_NOT_AUTHORIZED)
    forged_reply = f"$SYS/broker/{unique('reply')}"
    assert client.subscribe(forged_reply, qos=1) == [1]
    client.send(
        b'{"mqmd": {"ReplyToQ": "' + forged_reply.encode() + b'"}, "psc": {"Command": "Bad"}}'
    )
    client.sync()
    assert [m for m in client.received(CONNECTED) if m.payload == b"9999"] == []
    assert client.received(forged_reply) == []
    value = sys_value(broker.port, CONNECTED)
    assert value is not None and value.isdigit()
