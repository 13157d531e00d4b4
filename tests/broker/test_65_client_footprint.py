"""What keeps an idle connection small without changing what users see: the peer's address
packed in an int (`pack_peer`) still reads "host:port" in the admin API and the logs, and the
table of open connections (`ClientTable`) still holds each open connection once, whatever
order they come and go in.

In process: a real broker on a loopback port and plain socket clients, whose own addresses
the broker must report.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from telemq.broker import BrokerConfig, ListenerConfig
from telemq.broker.core.peer_address import pack_peer, peer_name, peer_text
from telemq.broker.core.session import Client, ClientHub
from telemq.broker.core.sessions import ClientTable
from telemq.broker.edges.listeners import MemoryListener
from telemq.broker.server import Broker
from telemq.broker.settings.config import LimitsConfig
from telemq.protocol import Connect, encode
from telemq.store import MemoryStore


@pytest.mark.parametrize(
    "peername, text",
    [
        (("127.0.0.1", 55555), "127.0.0.1:55555"),
        (("0.0.0.0", 0), "0.0.0.0:0"),
        (("255.255.255.255", 65535), "255.255.255.255:65535"),
        (("::1", 1883, 0, 0), "::1:1883"),
        (("2001:db8::8:800:200c:417a", 8883, 0, 0), "2001:db8::8:800:200c:417a:8883"),
        (("::ffff:10.0.0.1", 80, 0, 0), "::ffff:10.0.0.1:80"),
    ],
)
def test_an_ip_peer_is_packed_and_reads_back_as_it_came(
    peername: tuple[object, ...], text: str
) -> None:
    address = pack_peer(peername)
    assert address >= 0
    assert peer_text(address) == text


def test_an_ipv4_peer_fits_a_native_field() -> None:
    """Below 2**62: the compiled build keeps it unboxed, with no object behind it."""
    assert 0 <= pack_peer(("255.255.255.255", 65535)) < 2**62


@pytest.mark.parametrize(
    "peername, text",
    [
        (("fe80::1%eth0", 5, 0, 2), "fe80::1%eth0:5"),  # a scope: not packed
        (("embedded", 0), "embedded:0"),  # an in-process connection's name
        (("127.0.0.1", 70000), "127.0.0.1:70000"),  # not a port: kept as given
        (None, "?"),
        ((), "?"),
        ("/run/telemq.sock", "?"),
    ],
)
def test_other_peers_are_read_as_the_transport_names_them(peername: object, text: str) -> None:
    assert pack_peer(peername) == -1
    assert peer_name(peername) == text


def make_clients(count: int) -> list[Client]:
    """Clients never connected: all the table reads is their `slot` (real ones: the compiled
    build's table takes nothing else)."""
    loop = asyncio.new_event_loop()
    loop.close()
    hub = ClientHub(loop, LimitsConfig(), None)
    clients = [Client(hub, ListenerConfig()) for _ in range(count)]
    for number, client in enumerate(clients):
        client.client_id = str(number)
    return clients


def test_the_table_holds_each_open_connection_once_in_any_order_of_comings_and_goings() -> None:
    table = ClientTable()
    clients = make_clients(200)
    inside: set[str] = set()
    chance = random.Random(7)
    for _ in range(5000):
        client = chance.choice(clients)
        if chance.random() < 0.55:
            table.add(client)
            inside.add(client.client_id)
        else:
            table.discard(client)
            inside.discard(client.client_id)
        assert len(table) == len(inside)
        assert sorted(c.client_id for c in table) == sorted(inside)
        for c in clients:
            assert (c in table) == (c.client_id in inside)
            assert (c.slot >= 0) == (c.client_id in inside)


def test_a_member_of_another_table_is_not_taken_for_one_of_this() -> None:
    mine, theirs = ClientTable(), ClientTable()
    ours, stranger = make_clients(2)
    mine.add(ours)
    theirs.add(stranger)
    assert stranger not in mine
    mine.discard(stranger)
    assert len(mine) == 1 and ours in mine
    assert stranger in theirs


def test_the_broker_reports_each_clients_own_address_and_forgets_it_when_gone() -> None:
    config = BrokerConfig(listeners=[ListenerConfig(host="127.0.0.1", port=0)])
    config.sys.interval = 0

    async def main() -> None:
        broker = Broker(config, store=MemoryStore())
        await broker.start()
        writers: list[asyncio.StreamWriter] = []
        try:
            port = broker.bound_ports[0]
            addresses = {}
            for n in range(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writers.append(writer)
                writer.write(encode(Connect(f"c{n}")))
                assert (await reader.readexactly(4))[0] == 0x20  # CONNACK
                host, local_port = writer.get_extra_info("sockname")
                addresses[f"c{n}"] = f"{host}:{local_port}"
            assert {c.client_id: c.peer for c in broker.clients} == addresses
            for writer in writers[:3]:  # three go; the table keeps the other two
                writer.close()
            for _ in range(200):
                if len(broker.clients) == 2:
                    break
                await asyncio.sleep(0.01)
            assert {c.client_id: c.peer for c in broker.clients} == {
                "c3": addresses["c3"],
                "c4": addresses["c4"],
            }
        finally:
            for writer in writers:
                writer.close()
            await broker.stop()

    asyncio.run(main())


def test_an_in_process_connection_is_named_by_its_transport() -> None:
    """Its peer is no IP address: `peer` asks the transport, before and after the end."""
    config = BrokerConfig()
    config.sys.interval = 0
    listener = MemoryListener()

    async def main() -> None:
        async with Broker(config, store=MemoryStore(), listeners=[listener]) as broker:
            connection = await listener.connect()
            connection.write(encode(Connect("inside")))
            assert (await connection.readexactly(4))[0] == 0x20  # CONNACK
            (client,) = list(broker.clients)
            assert client.peer_address == -1
            assert client.peer == "memory:1:0"
            connection.close()
            for _ in range(200):
                if not len(broker.clients):
                    break
                await asyncio.sleep(0.01)
            assert client.peer == "memory:1:0"

    asyncio.run(main())
