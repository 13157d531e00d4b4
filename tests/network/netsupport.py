"""Networks of broker subprocesses for the network tests: names, ports, link users and
`[[links]]` tables written from a list of edges, brokers started and stopped together.

`Network(tmp_path, ["A", "B", "C"], [("A", "B"), ("B", "C")])` configures a chain in which A
dials B and B dials C (the first broker of an edge dials, the second accepts with a link
user). Every broker allows anonymous clients, publishes `$SYS` every 0.2 s, and its links
retry fast (0.1 to 1 s), so tests wait on states, never on sleeps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from testsupport.paho import PahoClient, Received, sys_value
from testsupport.process import BrokerProcess, free_port, users_and_acl, wait_until
from testsupport.relay import Relay

LINK_TIMEOUT = 20.0


class Network:
    def __init__(
        self,
        tmp_path: Path,
        names: Sequence[str],
        edges: Iterable[tuple[str, str]],
        extra: str = "",
        relayed: Iterable[tuple[str, str]] = (),
        http: bool = False,
    ) -> None:
        """`relayed`: edges whose dialer goes through a `Relay` the test can cut; `http`:
        every broker also serves HTTP (`/metrics`), on `http_ports[name]`."""
        self.names = list(names)
        self.edges = list(edges)
        # Each broker's neighbours name its port in their configurations: picked in advance.
        self.ports = {name: free_port() for name in names}
        self.http_ports = {name: free_port() for name in names} if http else {}
        self.relays = {edge: Relay(self.ports[edge[1]]) for edge in relayed}
        self.brokers: dict[str, BrokerProcess] = {}
        for name in names:
            self.brokers[name] = BrokerProcess(
                tmp_path / name,
                config_text=self.config_text(name) + extra,
                ports=[self.ports[name]],
            )

    def config_text(self, name: str) -> str:
        accepts = [dialer for dialer, acceptor in self.edges if acceptor == name]
        dials = [acceptor for dialer, acceptor in self.edges if dialer == name]
        lines = [f'name = "{name}"', "allow_anonymous = true", "[sys]", "interval = 0.2", ""]
        lines.append(users_and_acl({f"link-{d}": f"secret-{d}" for d in accepts}, []))
        for neighbour in dials:
            lines += [
                "[[links]]",
                f'name = "{neighbour}"',
                'host = "127.0.0.1"',
                f"port = {self.port_for(name, neighbour)}",
                f'username = "link-{name}"',
                f'password = "secret-{name}"',
                "reconnect_min = 0.1",
                "reconnect_max = 1.0",
                "",
            ]
        for neighbour in accepts:
            lines += ["[[links]]", f'name = "{neighbour}"', f'user = "link-{neighbour}"', ""]
        if name in self.http_ports:
            lines += ["[[http]]", 'host = "127.0.0.1"', f"port = {self.http_ports[name]}", ""]
        return "\n".join(lines)

    def port_for(self, dialer: str, acceptor: str) -> int:
        relay = self.relays.get((dialer, acceptor))
        return relay.port if relay is not None else self.ports[acceptor]

    def start(self, names: Iterable[str] | None = None) -> Network:
        for name in names if names is not None else self.names:
            self.brokers[name].start()
        return self

    def finalize(self) -> None:
        for relay in self.relays.values():
            relay.close()
        problems = []
        for broker in self.brokers.values():
            try:
                broker.finalize()
            except AssertionError as error:
                problems.append(str(error))
        assert not problems, "\n".join(problems)


def wait_link_state(network: Network, broker: str, link: str, state: str) -> bool:
    """Wait until `broker` reports `state` for its link to `link` ($SYS)."""
    port = network.ports[broker]
    topic = f"$SYS/broker/links/{link}/state"
    return wait_until(lambda: sys_value(port, topic, 1.0) == state, LINK_TIMEOUT, 0.2)


SENTINEL = b"sentinel from "  # the payload of a sentinel starts so; the broker's name follows


def sync_sentinels(
    network: Network,
    brokers: Iterable[str],
    topic: str,
    watchers: Sequence[PahoClient],
    timeout: float = LINK_TIMEOUT,
) -> None:
    """Wait until a sentinel published on `topic` at each of `brokers` has reached every
    one of `watchers` (each subscribed to `topic`): a copy that must not come, made or
    forwarded by those brokers before their sentinel, would have arrived first.

    Why that holds: a sentinel's publisher is a client of its broker, which routes its
    publications in order, and every link carries its messages in order (one FIFO
    queue per link session), as does each watcher's session. A broker may not route the
    sentinel to a watcher yet (a proxy subscription still on its way to it), so each one
    publishes again every 0.2 s until all the watchers have one; the first to arrive
    was published after its broker had everything it sends them ahead of it. Tests leave
    the sentinels out with `without_sentinels`.
    """
    publishers = {broker: PahoClient(network.ports[broker]) for broker in brokers}
    try:
        for broker, publisher in publishers.items():
            publisher.connect()
            payload = SENTINEL + broker.encode()

            def arrived(publisher: PahoClient = publisher, payload: bytes = payload) -> bool:
                publisher.publish(topic, payload, qos=1)
                return all(
                    any(m.payload == payload for m in watcher.received(topic))
                    for watcher in watchers
                )

            assert wait_until(arrived, timeout, 0.2), (
                f"the sentinel from {broker} on {topic!r} did not reach every watcher"
            )
    finally:
        for publisher in publishers.values():
            publisher.close()


def without_sentinels(messages: Iterable[Received]) -> list[Received]:
    """`messages` less the sentinels `sync_sentinels` published."""
    return [m for m in messages if not m.payload.startswith(SENTINEL)]
