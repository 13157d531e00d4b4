"""MQTT over WebSockets on the HTTP listener (docs/websockets.md): paho-mqtt's websockets
transport at 3.1, 3.1.1 and 5.0 on both default paths, MQTT.js under Node, TLS (wss), the
same users and ACL as TCP, packets split across and merged into WebSocket messages, and
the HTTP errors of what is not an MQTT WebSocket."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from telemq.protocol import ConnAck, Connect, Publish, SubAck, Subscribe, decode_packet, encode
from testsupport.node import MqttJsClient, payload, require_mqttjs
from testsupport.paho import MQTT5, MQTT31, MQTT311
from testsupport.process import users_and_acl

from .helpers import BrokerProcess, PahoClient, fixed, free_port, unique

BrokerFactory = Callable[..., BrokerProcess]
PASSWORDS = {"web": "web-pw"}
ACL = [("web", "all", "web/#", True)]


def http_config(tmp_path: Path, http_port: int, extra: str = "", http: str = "") -> Path:
    path = tmp_path / "ws.toml"
    path.write_text(
        f'{extra}\n[[http]]\nhost = "127.0.0.1"\nport = {http_port}\n{http}', encoding="utf-8"
    )
    return path


@pytest.fixture
def served(broker_factory: BrokerFactory) -> tuple[BrokerProcess, int]:
    """A broker with an HTTP listener (MQTT over WebSockets on /mqtt and /)."""
    http_port = free_port()
    return broker_factory("--http-port", str(http_port)), http_port


@pytest.mark.parametrize("path", ["/mqtt", "/"])
@pytest.mark.parametrize("version", [MQTT31, MQTT311, MQTT5], ids=["3.1", "3.1.1", "5"])
def test_paho_over_websockets_both_ways(
    served: tuple[BrokerProcess, int], path: str, version: int
) -> None:
    broker, http_port = served
    topic = unique("ws/paho")
    web = PahoClient(http_port, unique("ws"), version=version, websocket_path=path)
    tcp = PahoClient(broker.port, version=version)
    try:
        web.connect()
        tcp.connect()
        web.subscribe(topic + "/to-web", qos=2)
        tcp.subscribe(topic + "/to-tcp", qos=2)
        for qos in (0, 1, 2):
            tcp.publish(topic + "/to-web", f"tcp {qos}", qos=qos)
            web.publish(topic + "/to-tcp", f"web {qos}", qos=qos)
        got = sorted((m.payload, m.qos) for m in web.wait_messages(3))
        assert got == [(f"tcp {qos}".encode(), qos) for qos in (0, 1, 2)]
        got = sorted((m.payload, m.qos) for m in tcp.wait_messages(3))
        assert got == [(f"web {qos}".encode(), qos) for qos in (0, 1, 2)]
    finally:
        web.close()
        tcp.close()
    assert f"MQTT over WebSockets on ws://127.0.0.1:{http_port}/mqtt, /" in broker.log_text()


def test_mqttjs_over_websockets(served: tuple[BrokerProcess, int]) -> None:
    require_mqttjs()
    broker, http_port = served
    topic = f"ws/{unique('mqttjs')}"
    client = MqttJsClient(name="ws").start()
    tcp = PahoClient(broker.port, version=MQTT5)
    try:
        client.connect(
            url=f"ws://127.0.0.1:{http_port}/mqtt", protocolVersion=5, clientId=unique("js")
        )
        client.subscribe({topic + "/in": {"qos": 1}})
        tcp.connect()
        tcp.subscribe(topic + "/out", qos=1)
        tcp.publish(topic + "/in", b"to the browser", qos=1)
        [message] = client.messages(1)
        assert payload(message) == b"to the browser"
        client.publish(topic + "/out", b"from the browser", qos=1)
        assert [m.payload for m in tcp.wait_messages(1)] == [b"from the browser"]
        client.finish()  # and the script exited with status 0
    finally:
        client.close()
        tcp.close()


def test_the_same_users_and_acl_as_tcp(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    http_port = free_port()
    config = http_config(tmp_path, http_port, users_and_acl(PASSWORDS, ACL))
    broker_factory(config=config)
    anonymous = PahoClient(http_port, websocket_path="/mqtt")
    anonymous.client.connect("127.0.0.1", http_port)
    anonymous.client.loop_start()
    try:
        anonymous._wait(lambda: bool(anonymous.connacks), 10.0, "CONNACK")
        assert anonymous.connacks[-1][1] != 0  # anonymous access is off, over WebSockets too
    finally:
        anonymous.client.loop_stop()
    user = PahoClient(http_port, websocket_path="/mqtt", username="web", password=PASSWORDS["web"])
    try:
        user.connect()
        assert user.subscribe("web/ok", qos=1) == [1]
        assert user.subscribe("other/no", qos=1) == [0x80]  # the ACL
    finally:
        user.close()


def test_wss_over_the_listeners_tls(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    from .test_20_tls import make_pki

    pki = make_pki(tmp_path / "pki")
    http_port = free_port()
    tls = f'certfile = "{pki.server.cert}"\nkeyfile = "{pki.server.key}"\n'
    broker = broker_factory(config=http_config(tmp_path, http_port, http=tls))
    topic = unique("ws/tls")
    secure = PahoClient(http_port, websocket_path="/mqtt", tls_ca=str(pki.ca))
    tcp = PahoClient(broker.port)
    try:
        secure.connect()
        secure.subscribe(topic, qos=1)
        tcp.connect()
        tcp.publish(topic, b"encrypted", qos=1)
        assert [m.payload for m in secure.wait_messages(1)] == [b"encrypted"]
    finally:
        secure.close()
        tcp.close()
    assert f"MQTT over WebSockets on wss://127.0.0.1:{http_port}" in broker.log_text()


def read_packets(data: bytes) -> tuple[list[Any], bytes]:
    """The whole MQTT 3.1.1 packets at the start of `data`, and what is left."""
    packets = []
    while len(data) >= 2:
        length, shift, index = 0, 0, 1
        while True:
            if index >= len(data):
                return packets, data
            byte = data[index]
            length |= (byte & 0x7F) << shift
            shift += 7
            index += 1
            if not byte & 0x80:
                break
        if len(data) < index + length:
            break
        body = data[index : index + length]
        packets.append(decode_packet(fixed(data[0], body), 4))
        data = data[index + length :]
    return packets, data


async def _split_and_merged(http_port: int) -> list[Any]:
    topic = unique("ws/raw")
    connect = encode(Connect(unique("raw"), protocol_level=4))
    subscribe = encode(Subscribe(1, [(topic, 1)]))
    publish = encode(Publish(topic, b"one frame, two packets", qos=1, packet_id=2))
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{http_port}/mqtt"
        async with session.ws_connect(url, protocols=("mqtt",)) as ws:
            assert ws.protocol == "mqtt"
            await ws.send_bytes(connect[:3])  # a packet split across messages
            await ws.send_bytes(connect[3:])
            await ws.send_bytes(subscribe + publish)  # two packets in one message
            buffer, packets = b"", []
            while len(packets) < 4:  # CONNACK, SUBACK, PUBACK, the PUBLISH
                message = await asyncio.wait_for(ws.receive(), 10.0)
                assert message.type is aiohttp.WSMsgType.BINARY, message
                buffer += message.data
                more, buffer = read_packets(buffer)
                packets += more
            return packets


def test_packets_split_across_and_merged_into_messages(
    served: tuple[BrokerProcess, int],
) -> None:
    _, http_port = served
    packets = asyncio.run(_split_and_merged(http_port))
    assert isinstance(packets[0], ConnAck) and packets[0].return_code == 0
    assert SubAck(1, [1]) in packets
    assert any(isinstance(p, Publish) and p.payload == b"one frame, two packets" for p in packets)


def test_what_is_not_an_mqtt_websocket_gets_400(served: tuple[BrokerProcess, int]) -> None:
    _, http_port = served
    with pytest.raises(urllib.error.HTTPError) as plain:
        urllib.request.urlopen(f"http://127.0.0.1:{http_port}/mqtt", timeout=10)
    assert plain.value.code == 400
    assert "WebSocket upgrade" in json.loads(plain.value.read())["error"]

    async def other_subprotocol() -> tuple[int, str]:
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{http_port}/mqtt"
            try:
                async with session.ws_connect(url, protocols=("chat",)):
                    return 101, ""
            except aiohttp.WSServerHandshakeError as error:
                return error.status, error.message

    status, _ = asyncio.run(other_subprotocol())
    assert status == 400

    async def text_message() -> int | None:
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{http_port}/mqtt"
            async with session.ws_connect(url, protocols=("mqtt",)) as ws:
                await ws.send_str("not MQTT")
                message = await asyncio.wait_for(ws.receive(), 10.0)
                assert message.type is aiohttp.WSMsgType.CLOSE, message
                return ws.close_code

    assert asyncio.run(text_message()) == 1003  # unsupported data


def test_the_paths_are_configurable_and_mqttv31_is_a_subprotocol(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    http_port = free_port()
    http = 'websocket_paths = ["/custom/ws"]\n'
    broker_factory(config=http_config(tmp_path, http_port, http=http))

    async def handshake(path: str, protocol: str) -> tuple[int, str | None]:
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{http_port}{path}"
            try:
                async with session.ws_connect(url, protocols=(protocol,)) as ws:
                    return 101, ws.protocol
            except aiohttp.WSServerHandshakeError as error:
                return error.status, None

    assert asyncio.run(handshake("/custom/ws", "mqttv3.1")) == (101, "mqttv3.1")
    assert asyncio.run(handshake("/custom/ws", "mqtt")) == (101, "mqtt")
    # /mqtt is no WebSocket path here: the journal service's authentication answers.
    assert asyncio.run(handshake("/mqtt", "mqtt"))[0] in (401, 404)
    # / is no WebSocket path either: a plain GET is still the dashboard, an upgrade is not.
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/", timeout=10) as page:
        assert page.headers["Content-Type"].startswith("text/html")
    assert asyncio.run(handshake("/", "mqtt"))[0] != 101


def test_a_plain_get_of_root_is_the_dashboard(served: tuple[BrokerProcess, int]) -> None:
    """`/` is both (docs/websockets.md): an upgrade is MQTT (the tests above), a plain GET
    the dashboard's page, with the files it loads; none of them needs credentials."""
    _, http_port = served
    base = f"http://127.0.0.1:{http_port}"
    with urllib.request.urlopen(base + "/", timeout=10) as page:
        assert page.headers["Content-Type"] == "text/html; charset=utf-8"
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        assert b"/dashboard/app.js" in page.read()
    with urllib.request.urlopen(base + "/dashboard/app.js", timeout=10) as script:
        assert script.headers["Content-Type"] == "text/javascript; charset=utf-8"
    for missing in ("/dashboard/nothing.js", "/dashboard/vendor/nothing.js"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + missing, timeout=10)
        assert refused.value.code == 404
        assert "nothing.js" in json.loads(refused.value.read())["error"]
