"""Interoperability with Debian's ``mosquitto_pub`` / ``mosquitto_sub`` (MQTT 3.1 and 3.1.1).

``mosquitto_sub`` runs with ``-d`` (debug lines tell us when the SUBACK arrived) and
``-F 'MSG|%q|%r|%t|%p'`` (QoS, retain flag, topic, payload per message).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .helpers import (
    MOSQ_FORMAT,
    BrokerProcess,
    MosqMessage,
    MosquittoSub,
    PahoClient,
    mosquitto_pub,
    mosquitto_sub_run,
    parse_mosq_lines,
    unique,
    wait_until,
)

pytestmark = [
    pytest.mark.interop,
    pytest.mark.timeout(60),
]

VERSIONS = ["mqttv31", "mqttv311"]
PahoMaker = Callable[..., PahoClient]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("mosq") / "broker", args=["--sys-interval", "1"])
    b.start()
    yield b
    b.finalize()


@pytest.fixture
def subs() -> Iterator[Callable[..., MosquittoSub]]:
    started: list[MosquittoSub] = []

    def make(port: int, topics: list[str], *args: str, version: str = "mqttv311") -> MosquittoSub:
        sub = MosquittoSub(port, topics, *args, version=version)
        started.append(sub)
        return sub

    yield make
    for sub in started:
        sub.kill()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_pub_sub_every_qos(
    port: int, subs: Callable[..., MosquittoSub], version: str, qos: int
) -> None:
    topic = unique("mq/")
    sub = subs(port, [topic], "-q", str(qos), "-C", "3", version=version)
    sub.wait_subscribed()
    for i in range(3):
        mosquitto_pub(port, "-t", topic, "-m", f"msg {i}", "-q", str(qos), version=version)
    assert sub.wait_exit() == 0
    assert sub.messages() == [MosqMessage(topic, f"msg {i}", qos, False) for i in range(3)]


@pytest.mark.parametrize(("pub_qos", "sub_qos"), [(2, 0), (2, 1), (1, 2), (0, 2)])
def test_delivered_qos_is_min(
    port: int, subs: Callable[..., MosquittoSub], pub_qos: int, sub_qos: int
) -> None:
    topic = unique("mqm/")
    sub = subs(port, [topic], "-q", str(sub_qos), "-C", "1")
    sub.wait_subscribed()
    mosquitto_pub(port, "-t", topic, "-m", "x", "-q", str(pub_qos))
    assert sub.wait_exit() == 0
    assert sub.messages() == [MosqMessage(topic, "x", min(pub_qos, sub_qos), False)]


@pytest.mark.parametrize("version", VERSIONS)
def test_many_lines_in_order_qos2(
    port: int, subs: Callable[..., MosquittoSub], version: str
) -> None:
    topic = unique("mql/")
    n = 200
    sub = subs(port, [topic], "-q", "2", "-C", str(n), version=version)
    sub.wait_subscribed()
    lines = "".join(f"line {i}\n" for i in range(n)).encode()
    mosquitto_pub(port, "-t", topic, "-q", "2", "-l", stdin=lines, version=version)
    assert sub.wait_exit(30) == 0
    assert [m.payload for m in sub.messages()] == [f"line {i}" for i in range(n)]


def retained_then_sentinel(
    subs: Callable[..., MosquittoSub], port: int, prefix: str, version: str = "mqttv311"
) -> list[MosqMessage]:
    """Subscribe to ``prefix/#``, then publish a live sentinel; return what came before it
    (the retained messages, which are sent right after the SUBACK)."""
    sub = subs(port, [f"{prefix}/#"], "-q", "1", version=version)
    sub.wait_subscribed()
    mosquitto_pub(port, "-t", f"{prefix}/sentinel", "-m", "sentinel", "-q", "1")
    sub.wait_line(lambda line: line.endswith(f"{prefix}/sentinel|sentinel"))
    got = sub.messages()
    assert got[-1] == MosqMessage(f"{prefix}/sentinel", "sentinel", 1, False)
    return got[:-1]


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_set_read_and_delete(
    port: int, subs: Callable[..., MosquittoSub], version: str
) -> None:
    prefix = unique("mqr")
    topic = f"{prefix}/state"
    mosquitto_pub(port, "-t", topic, "-m", "on", "-q", "1", "-r", version=version)
    rc, out = mosquitto_sub_run(
        port, "-t", topic, "-q", "1", "-C", "1", "-W", "10", "-F", MOSQ_FORMAT, version=version
    )
    assert rc == 0, out
    assert parse_mosq_lines(out) == [MosqMessage(topic, "on", 1, True)]
    # -n: a zero-length retained message deletes it.
    mosquitto_pub(port, "-t", topic, "-n", "-r", "-q", "1", version=version)
    mosquitto_pub(port, "-t", f"{prefix}/other", "-m", "kept", "-r", "-q", "1", version=version)
    assert retained_then_sentinel(subs, port, prefix, version) == [
        MosqMessage(f"{prefix}/other", "kept", 1, True)
    ]


def test_remove_retained_option(port: int, subs: Callable[..., MosquittoSub]) -> None:
    """``mosquitto_sub --remove-retained`` clears the retained messages it sees."""
    prefix = unique("mqrr")
    for i in range(3):
        mosquitto_pub(port, "-t", f"{prefix}/{i}", "-m", "r", "-r", "-q", "1")
    cleaner = subs(port, [f"{prefix}/#"], "--remove-retained")
    # 3 retained messages, then the 3 empty messages it published, forwarded back live.
    got = cleaner.wait_messages(6)
    assert sorted((m.payload, m.retain) for m in got) == [("", False)] * 3 + [("r", True)] * 3
    cleaner.stop()
    assert retained_then_sentinel(subs, port, prefix) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_persistent_session_offline_queue(port: int, version: str) -> None:
    cid = unique("mqc")
    topic = unique("mqc/")
    # -E: subscribe, then exit (cleanly) once the SUBACK arrived; -c keeps the session.
    rc, out = mosquitto_sub_run(
        port, "-c", "-i", cid, "-q", "2", "-t", topic, "-E", version=version
    )
    assert rc == 0, out
    mosquitto_pub(port, "-t", topic, "-m", "zero", "-q", "0", version=version)
    mosquitto_pub(port, "-t", topic, "-m", "one", "-q", "1", version=version)
    mosquitto_pub(port, "-t", topic, "-m", "two", "-q", "2", version=version)
    rc, out = mosquitto_sub_run(
        port,
        "-c",
        "-i",
        cid,
        "-q",
        "2",
        "-t",
        topic,
        "-C",
        "2",
        "-W",
        "10",
        "-F",
        MOSQ_FORMAT,
        version=version,
    )
    assert rc == 0, out
    assert parse_mosq_lines(out) == [
        MosqMessage(topic, "one", 1, False),
        MosqMessage(topic, "two", 2, False),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_will_on_kill_but_not_on_clean_disconnect(
    port: int, subs: Callable[..., MosquittoSub], version: str
) -> None:
    topic = unique("mqw/")
    watcher = subs(port, [topic], "-q", "1")
    watcher.wait_subscribed()
    # -C 1: mosquitto_sub sends DISCONNECT after one message and exits -> no will.
    polite_topic = unique("x/")
    polite = subs(
        port,
        [polite_topic],
        "-C",
        "1",
        "--will-topic",
        topic,
        "--will-payload",
        "polite",
        "--will-qos",
        "1",
        version=version,
    )
    polite.wait_subscribed()
    mosquitto_pub(port, "-t", polite_topic, "-m", "bye")
    assert polite.wait_exit() == 0
    assert "sending DISCONNECT" in polite.output()
    # SIGKILL: the socket just closes -> will.
    rude = subs(
        port,
        [unique("x/")],
        "--will-topic",
        topic,
        "--will-payload",
        "rude",
        "--will-qos",
        "1",
        version=version,
    )
    rude.wait_subscribed()
    rude.kill()
    watcher.wait_messages(1)
    mosquitto_pub(port, "-t", topic, "-m", "sentinel", "-q", "1")
    got = watcher.wait_messages(2)
    assert [m.payload for m in got] == ["rude", "sentinel"]


def test_retained_will(port: int, subs: Callable[..., MosquittoSub]) -> None:
    topic = unique("mqrw/")
    victim = subs(
        port,
        [unique("x/")],
        "--will-topic",
        topic,
        "--will-payload",
        "offline",
        "--will-qos",
        "1",
        "--will-retain",
    )
    victim.wait_subscribed()
    victim.kill()
    rc, out = mosquitto_sub_run(
        port, "-t", topic, "-q", "1", "-C", "1", "-W", "10", "-F", MOSQ_FORMAT
    )
    assert rc == 0, out
    assert parse_mosq_lines(out) == [MosqMessage(topic, "offline", 1, True)]


def test_takeover_by_client_id(
    port: int, subs: Callable[..., MosquittoSub], paho_client: PahoMaker
) -> None:
    """A second client with the same id takes over; the first connection is closed (seen in
    mosquitto_sub's debug output as a new CONNECT when it reconnects, or its exit)."""
    cid = unique("mqt")
    topic = unique("mqt/")
    first = subs(port, [topic], "-i", cid, "-q", "1")
    first.wait_subscribed()
    connects_before = first.output().count("sending CONNECT")
    thief = paho_client(port, cid)
    thief.subscribe(topic, 1)

    def first_lost_connection() -> bool:
        return first.proc.poll() is not None or (
            first.output().count("sending CONNECT") > connects_before
        )

    assert wait_until(first_lost_connection, 10), first.output()


def test_sys_version_readable(port: int) -> None:
    rc, out = mosquitto_sub_run(port, "-t", "$SYS/broker/version", "-C", "1", "-W", "10", "-v")
    assert rc == 0, out
    assert out.startswith("$SYS/broker/version ")
    assert out.split(" ", 1)[1].strip()


def test_sys_numbers_via_wildcard(port: int) -> None:
    rc, out = mosquitto_sub_run(
        port, "-t", "$SYS/broker/clients/+", "-C", "2", "-W", "10", "-F", MOSQ_FORMAT
    )
    assert rc == 0, out
    got = parse_mosq_lines(out)
    assert {m.topic for m in got} == {
        "$SYS/broker/clients/connected",
        "$SYS/broker/clients/total",
    }
    assert all(m.payload.isdigit() for m in got)


def test_hash_subscription_does_not_see_sys(port: int, subs: Callable[..., MosquittoSub]) -> None:
    sub = subs(port, ["#"])
    sub.wait_subscribed()
    # Two $SYS refreshes pass while subscribed to "#".
    for _ in range(2):
        rc, out = mosquitto_sub_run(port, "-t", "$SYS/broker/uptime", "-C", "1", "-R", "-W", "10")
        assert rc == 0, out
    topic = unique("mqh/")
    mosquitto_pub(port, "-t", topic, "-m", "sentinel")
    sub.wait_line(lambda line: line.endswith("|sentinel"))
    assert [m.topic for m in sub.messages() if m.topic.startswith("$")] == []


def test_large_message_from_stdin(port: int, subs: Callable[..., MosquittoSub]) -> None:
    topic = unique("mqbig/")
    sub = subs(port, [topic], "-q", "1", "-C", "1", "-N")
    sub.wait_subscribed()
    payload = ("0123456789abcdef" * 8192).encode()  # 128 KiB, no newline
    mosquitto_pub(port, "-t", topic, "-q", "1", "-s", stdin=payload)
    assert sub.wait_exit() == 0
    assert payload.decode() in sub.output()


def test_mosquitto_and_paho_interoperate(
    port: int, subs: Callable[..., MosquittoSub], paho_client: PahoMaker
) -> None:
    topic = unique("mqp/")
    sub = subs(port, [topic], "-q", "2", "-C", "1")
    sub.wait_subscribed()
    paho_sub = paho_client(port)
    paho_sub.subscribe(topic, 2)
    paho_pub = paho_client(port)
    paho_pub.publish(topic, b"from paho", qos=2)
    assert sub.wait_exit() == 0
    assert sub.messages() == [MosqMessage(topic, "from paho", 2, False)]
    mosquitto_pub(port, "-t", topic, "-m", "from mosquitto", "-q", "1")
    got = paho_sub.wait_messages(2)
    assert [(m.payload, m.qos) for m in got] == [(b"from paho", 2), (b"from mosquitto", 1)]
