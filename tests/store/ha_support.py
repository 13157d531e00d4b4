"""What the `[ha]` tests share: a group of broker processes on one PostgreSQL database,
`/health`, and paho clients that know every member's address.

`Group` starts members ``a``, ``b`` (``python -m telemq serve`` subprocesses, `BrokerProcess`)
with fixed MQTT and HTTP ports, each one's `server_reference` naming the other. `Failover`
is a persistent paho client (v2 callback API, its network thread reconnecting by itself)
that moves to the next address of its list whenever a connection ends or fails: a
standby's refusal (CONNACK 3) or a dead member's closed port sends it on, the way
paho-based applications follow a list of brokers (docs/ha.md). `Publisher` publishes
through one; `check_delivered` checks a run's end in the subscriber and the journal;
`RawClient` shows exactly what a member answers.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from telemq.store.postgres_reader import PostgresJournalReader
from testsupport.postgres import PostgresServer
from testsupport.process import HOST, BrokerProcess, free_port, unique, wait_until

DEADLINE = 90.0
POLL = 0.2  # [ha] poll_interval of the test members
TOPICS = [("ha/q1", 1), ("ha/q2", 2)]  # what `Publisher` publishes to


def health(http_port: int) -> tuple[int, dict[str, Any]]:
    """`/health`: (status, JSON body), or (0, {}) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{http_port}/health", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except (OSError, ValueError):
        return 0, {}


@dataclass
class Member:
    name: str
    process: BrokerProcess
    port: int
    http: int

    def role(self) -> str:
        return str(health(self.http)[1].get("role", "down"))

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


class Group:
    """Members of one `[ha]` group on the database `dsn` names (see the module docstring)."""

    def __init__(
        self,
        server: PostgresServer,
        dsn: str,
        workdir: Path,
        names: tuple[str, ...] = ("a", "b"),
        extra: str = "",
        *,
        dsns: dict[str, str] | None = None,
        lease: float = 5.0,
    ) -> None:
        """`extra`: more configuration, the same for every member (top-level keys first);
        `dsns`: a member's own DSN instead of `dsn` (through a relay, say); `lease`: the
        members' `[ha] lease`."""
        secret = workdir / "pg.password"
        workdir.mkdir(parents=True, exist_ok=True)
        secret.write_text(server.password + "\n", encoding="utf-8")
        ports = {name: (free_port(), free_port()) for name in names}
        self.members: dict[str, Member] = {}
        for index, name in enumerate(names):
            other = names[(index + 1) % len(names)]
            port, http = ports[name]
            plain = (dsns or {}).get(name, dsn).replace(f" password={server.password}", "")
            text = (
                f"{extra}\n[sys]\ninterval = 1\n"
                f'[[http]]\nhost = "{HOST}"\nport = {http}\n'
                f'[ha]\nenabled = true\nmember = "{name}"\npoll_interval = {POLL}\n'
                f'rejoin_delay = 1.0\nserver_reference = "{HOST}:{ports[other][0]}"\n'
                f"lease = {lease}\n"
                f'[store]\nkind = "postgres"\ndsn = "{plain}"\npassword_file = "{secret}"\n'
                'sync = "full"\n'
            )
            process = BrokerProcess(workdir / name, config_text=text, ports=[port])
            self.members[name] = Member(name, process, port, http)

    def __getitem__(self, name: str) -> Member:
        return self.members[name]

    @property
    def ports(self) -> list[int]:
        return [member.port for member in self.members.values()]

    def active(self) -> list[Member]:
        return [m for m in self.members.values() if m.process.running and m.role() == "active"]

    def wait_for_one_active(self, other_than: Member | None = None) -> Member:
        """Wait until exactly one running member is active (not `other_than`): that one."""

        def settled() -> bool:
            active = self.active()
            return len(active) == 1 and active[0] is not other_than

        assert wait_until(settled, DEADLINE, 0.05), {n: m.role() for n, m in self.members.items()}
        return self.active()[0]

    def finalize(self) -> None:
        for member in self.members.values():
            with contextlib.suppress(Exception):
                member.process.finalize()


@contextlib.contextmanager
def started_group(
    server: PostgresServer, dsn: str, workdir: Path, extra: str = ""
) -> Iterator[Group]:
    """Members a and b (`Group`), a started first: a is active, b stands by; finalized when
    the block ends."""
    members = Group(server, dsn, workdir, extra=extra)
    try:
        members["a"].process.start()
        assert members.wait_for_one_active() is members["a"]
        members["b"].process.start()
        yield members
    finally:
        members.finalize()


class Failover:
    """A persistent paho client that follows a list of broker addresses (module docstring):
    its own thread connects to one address, runs paho's loop until the connection ends
    (a refusal, a closed port, a broker gone), then tries the next, with the same client
    (paho keeps the session's messages in flight and re-sends them)."""

    def __init__(self, client_id: str, ports: list[int], *, inflight: int = 20) -> None:
        self.ports = ports
        self.client = paho.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=False,
            reconnect_on_failure=False,  # the thread below reconnects, to the next address
        )
        self.client.max_inflight_messages_set(inflight)
        self._lock = threading.Lock()
        self.connacks: list[tuple[int, bool]] = []  # (port, session present) of accepted ones
        self.refusals = 0
        self.received: list[tuple[str, int]] = []  # (payload, qos)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        with self._lock:
            if rc.is_failure:
                self.refusals += 1
            else:
                self.connacks.append((self.client.port, bool(flags.session_present)))

    def _on_message(self, client: Any, userdata: Any, message: paho.MQTTMessage) -> None:
        with self._lock:
            self.received.append((message.payload.decode(), message.qos))

    def _run(self, first: int) -> None:
        index = self.ports.index(first)
        while not self._stopping.is_set():
            with contextlib.suppress(OSError):
                self.client.connect(HOST, self.ports[index], keepalive=30)
                self.client.loop_forever()
            index = (index + 1) % len(self.ports)
            self._stopping.wait(0.05)

    def start(self, port: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(port,), daemon=True)
        self._thread.start()
        assert wait_until(lambda: len(self.connacks) > 0, DEADLINE), "never connected"

    def subscribe(self, topics: list[tuple[str, int]]) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda *args: done.set()
        result, _ = self.client.subscribe(topics)
        assert result == paho.MQTT_ERR_SUCCESS
        assert done.wait(10), "no SUBACK"

    def payloads(self) -> Counter[str]:
        with self._lock:
            return Counter(payload for payload, _ in self.received)

    def stop(self) -> None:
        self._stopping.set()
        self.client.disconnect()
        if self._thread is not None:
            self._thread.join(10)


class Publisher:
    """A `Failover` publishing QoS 1 and QoS 2 messages alternately to ``ha/q1``, ``ha/q2``
    from a thread of its own, while connected, until stopped; `acknowledged` are those it had
    PUBACK or PUBCOMP for (paho's `on_publish`, also for a message it re-sent to another
    member)."""

    def __init__(self, ports: list[int], prefix: str) -> None:
        self.failover = Failover(f"ha-publisher-{prefix}", ports)
        self.prefix = prefix
        self.sent: dict[int, str] = {}  # mid -> payload
        self._acked: set[int] = set()
        self.ack_ports: list[int] = []  # the member's port of each acknowledgement, in order
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.failover.client.on_publish = self._on_publish

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        with self._lock:
            self._acked.add(mid)
            self.ack_ports.append(self.failover.client.port)

    def start(self, port: int) -> None:
        self.failover.start(port)
        self._thread.start()

    def _run(self) -> None:
        client = self.failover.client
        i = 0
        while not self._stop.is_set():
            with self._lock:
                waiting = len(self.sent) - len(self._acked)
            if waiting >= 40 or not client.is_connected():
                time.sleep(0.005)  # a bounded window: the rest waits for the broker
                continue
            qos = 1 + i % 2
            payload = f"{self.prefix}:q{qos}:{i}"
            # Not under the lock: paho calls `_on_publish` holding a lock `publish` takes.
            info = client.publish(f"ha/q{qos}", payload, qos)
            with self._lock:
                self.sent[info.mid] = payload
            i += 1
            time.sleep(0.002)

    def acknowledged(self) -> set[str]:
        with self._lock:
            return {payload for mid, payload in self.sent.items() if mid in self._acked}

    def stop(self) -> set[str]:
        """Stop publishing; wait until everything sent is acknowledged; what was."""
        self._stop.set()
        self._thread.join(10)
        with self._lock:
            sent = set(self.sent.values())
        assert len(sent) < 60_000  # paho's message ids are not reused meanwhile
        assert wait_until(lambda: self.acknowledged() == sent, DEADLINE), (
            f"{len(self.acknowledged())} of {len(sent)} acknowledged"
        )
        self.failover.stop()
        return sent


def terminate_backend(server: PostgresServer, dbname: str, member: str) -> int:
    """Cut a member's database connection, the one holding the lock (`pg_terminate_backend`
    on the backend `pg_stat_activity` names by its application name); its pid."""
    rows = server.admin(
        "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
        " WHERE a.datname = %s AND a.application_name = %s"
        " AND l.locktype = 'advisory' AND l.granted",
        (dbname, f"telemq (broker telemq, member {member})"),
    )
    assert len(rows) == 1, rows
    pid = int(rows[0][0])
    server.admin("SELECT pg_terminate_backend(%s)", (pid,))
    return pid


def q2_duplicates(counts: Counter[str]) -> list[str]:
    """`Publisher`'s QoS 2 payloads counted more than once."""
    return sorted(payload for payload, n in counts.items() if ":q2:" in payload and n > 1)


def journal_counts(dsn: str) -> Counter[str]:
    """How often each payload is in the journal of the database `dsn` names."""
    with PostgresJournalReader(dsn) as reader:
        first, last = reader.bounds()
        return Counter(row[6].decode() for row in reader.rows(first, last))


def check_delivered(subscriber: Failover, sent: set[str], dsn: str) -> Counter[str]:
    """Every message sent (all acknowledged) reached the subscriber and the journal, QoS 2
    exactly once; stops the subscriber; the journal's counts."""
    assert wait_until(lambda: set(subscriber.payloads()) >= sent, DEADLINE), sorted(
        sent - set(subscriber.payloads())
    )[:10]
    time.sleep(0.5)  # a duplicate would arrive now
    assert q2_duplicates(subscriber.payloads()) == []
    subscriber.stop()
    journaled = journal_counts(dsn)
    assert set(journaled) >= sent
    assert q2_duplicates(journaled) == []
    return journaled


def mqtt_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


class RawClient:
    """A clean MQTT 3.1.1 session over a plain socket: what exactly a broker answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=10)
        body = mqtt_string("MQTT") + bytes([4, 0x02]) + struct.pack(">H", 30)
        body += mqtt_string(unique("raw"))
        self.sock.sendall(bytes([0x10, len(body)]) + body)
        assert self.read_all(4) == b"\x20\x02\x00\x00", "not accepted"

    def read_all(self, limit: int = 1 << 16) -> bytes:
        """What the broker sends until it closes the connection (or `limit` bytes)."""
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while len(data) < limit and (chunk := self.sock.recv(limit - len(data))):
                data += chunk
        return data

    def publish_qos1(self, topic: str, payload: bytes, packet_id: int) -> None:
        body = mqtt_string(topic) + struct.pack(">H", packet_id) + payload
        with contextlib.suppress(OSError):  # a broker that closed first: no answer either way
            self.sock.sendall(bytes([0x32, len(body)]) + body)

    def close(self) -> None:
        self.sock.close()
