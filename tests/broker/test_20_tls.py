"""TLS listeners: certificates, client verification, identity as user name, config errors.

The test makes its own PKI with the `cryptography` package when it is installed, else with
the `openssl` command: a CA, a server certificate for 127.0.0.1 / localhost, client
certificates (CN `sensor1`, `client1`) and, from a second CA, a foreign client certificate
with the same CN `sensor1`. Every broker also has a plain listener, listed last, which the
readiness probe uses (listeners open in order, so the TLS ones are up by then).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from telemq.broker import ConfigError
from telemq.broker.settings.config import config_from_mapping

from .helpers import (
    HOST,
    BrokerProcess,
    ConnectionClosed,
    MosquittoSub,
    PahoClient,
    RawClient,
    connect_packet,
    free_port,
    mosquitto_pub,
    raw_connected,
    roundtrip,
    unique,
    write_config,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]

PahoMaker = Callable[..., PahoClient]
CONNACK_NOT_AUTHORIZED = 5
CONNECT_TIMEOUT = 2.0


# ---------------------------------------------------------------------------------------------
# Test PKI
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path  # signs the server and the trusted client certificates
    other_ca: Path  # an unrelated CA: its certificates must be refused
    server: KeyPair  # CN and SAN 127.0.0.1, SAN localhost
    sensor1: KeyPair  # CN sensor1
    client1: KeyPair  # CN client1
    intruder: KeyPair  # CN sensor1 too, but signed by other_ca
    encrypted_key: Path  # the server key under the pass phrase "secret"


def _pki_with_cryptography(directory: Path) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path, password: bytes | None) -> Path:
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password)
            if password
            else serialization.NoEncryption()
        )
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
            )
        )
        return path

    def issue(
        name: str,
        issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
        *,
        usage: x509.ObjectIdentifier | None = None,
        san: list[x509.GeneralName] | None = None,
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        issuer_name, signing_key = (
            (issuer[0].subject, issuer[1]) if issuer is not None else (subject, key)
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()),
                False,
            )
        )
        if issuer is None:
            builder = builder.add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                True,
            )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), False)
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), False)
        return builder.sign(signing_key, hashes.SHA256()), key

    def save(pair: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], name: str) -> KeyPair:
        cert = directory / f"{name}.pem"
        cert.write_bytes(pair[0].public_bytes(serialization.Encoding.PEM))
        return KeyPair(cert, write_key(pair[1], directory / f"{name}.key", None))

    ca = issue("telemq test CA", None)
    other = issue("another test CA", None)
    server = issue(
        "127.0.0.1",
        ca,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        san=[x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")],
    )
    client = ExtendedKeyUsageOID.CLIENT_AUTH
    return Pki(
        ca=save(ca, "ca").cert,
        other_ca=save(other, "other-ca").cert,
        server=save(server, "server"),
        sensor1=save(issue("sensor1", ca, usage=client), "sensor1"),
        client1=save(issue("client1", ca, usage=client), "client1"),
        intruder=save(issue("sensor1", other, usage=client), "intruder"),
        encrypted_key=write_key(server[1], directory / "encrypted.key", b"secret"),
    )


def _pki_with_openssl(directory: Path) -> Pki:
    def run(*args: str) -> None:
        result = subprocess.run(
            ["openssl", *args], cwd=directory, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, f"openssl {' '.join(args)}:\n{result.stderr}"

    def new_key(name: str) -> str:
        run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name)
        return name

    def new_ca(name: str, common_name: str) -> str:
        run(
            "req", "-x509", "-new", "-key", new_key(f"{name}.key"), "-out", f"{name}.pem",
            "-days", "2", "-subj", f"/CN={common_name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        return name

    def issue(name: str, common_name: str, ca: str, extensions: str) -> KeyPair:
        (directory / f"{name}.ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid\n" + extensions
        )
        run("req", "-new", "-key", new_key(f"{name}.key"), "-subj", f"/CN={common_name}",
            "-out", f"{name}.csr")  # fmt: skip
        run(
            "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-set_serial", str(int.from_bytes(name.encode(), "big")), "-days", "2",
            "-extfile", f"{name}.ext", "-out", f"{name}.pem",
        )  # fmt: skip
        return KeyPair(directory / f"{name}.pem", directory / f"{name}.key")

    ca = new_ca("ca", "telemq test CA")
    other = new_ca("other-ca", "another test CA")
    client = "extendedKeyUsage=clientAuth\n"
    server = issue(
        "server",
        HOST,
        ca,
        f"extendedKeyUsage=serverAuth\nsubjectAltName=IP:{HOST},DNS:localhost\n",
    )
    run("pkey", "-in", "server.key", "-aes256", "-passout", "pass:secret", "-out", "encrypted.key")
    return Pki(
        ca=directory / f"{ca}.pem",
        other_ca=directory / f"{other}.pem",
        server=server,
        sensor1=issue("sensor1", "sensor1", ca, client),
        client1=issue("client1", "client1", ca, client),
        intruder=issue("intruder", "sensor1", other, client),
        encrypted_key=directory / "encrypted.key",
    )


def make_pki(directory: Path) -> Pki:
    """Certificates for the tests: with `cryptography` if importable, else `openssl`."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        import cryptography  # noqa: F401
    except ImportError:
        assert shutil.which("openssl"), "TLS tests need the cryptography package or openssl"
        return _pki_with_openssl(directory)
    return _pki_with_cryptography(directory)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# ---------------------------------------------------------------------------------------------
# Clients and brokers
# ---------------------------------------------------------------------------------------------


def client_context(ca: Path, pair: KeyPair | None = None) -> ssl.SSLContext:
    """What a careful client uses: verify the server against `ca`, present `pair` if given."""
    context = ssl.create_default_context(cafile=str(ca))
    if pair is not None:
        context.load_cert_chain(str(pair.cert), str(pair.key))
    return context


class TlsRawClient(RawClient):
    """RawClient over TLS; the handshake runs in the constructor (ssl.SSLError if it fails)."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__(port)
        self.sock = context.wrap_socket(self.sock, server_hostname=HOST)


def tls_connected(port: int, context: ssl.SSLContext, **kwargs: Any) -> TlsRawClient:
    client = TlsRawClient(port, context)
    ack = client.connect(unique("tls"), **kwargs)
    assert ack.return_code == 0, f"CONNECT over TLS refused: {ack}"
    return client


def refused_by_tls(port: int, context: ssl.SSLContext) -> str:
    """Connect and send CONNECT: TLS must end the connection before any CONNACK.

    With TLS 1.3 the server judges the client's certificate after the client considers the
    handshake done, so the refusal may only show on the first read.
    """
    try:
        client = TlsRawClient(port, context)
    except ssl.SSLError as error:
        return repr(error)
    with client:
        try:
            client.send(connect_packet(unique("tls")))
            packet = client.recv_packet()
        except TimeoutError:
            raise AssertionError("the TLS connection neither failed nor got an answer") from None
        except (ssl.SSLError, ConnectionClosed, OSError) as error:
            return repr(error)
    raise AssertionError(f"TLS accepted the connection and the broker answered {packet!r}")


def tls_paho(paho_factory: PahoMaker, port: int, context: ssl.SSLContext) -> PahoClient:
    client = paho_factory(port)
    client.client.tls_set_context(context)
    client.connect()
    return client


def mosquitto_pub_refused(port: int, *tls_options: str) -> str:
    """Run `mosquitto_pub -q 1` with `tls_options`; it must fail. Returns its output."""
    topic = unique("never/")
    command = ["mosquitto_pub", "-h", HOST, "-p", str(port), *tls_options]
    result = subprocess.run(
        [*command, "-t", topic, "-m", "x", "-q", "1"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"mosquitto_pub {tls_options} was accepted:\n{output}"
    return output or f"exit code {result.returncode}"


@dataclass
class TlsBroker:
    process: BrokerProcess
    tls_port: int

    @property
    def plain_port(self) -> int:
        return self.process.port


def tls_listener_toml(port: int, pki: Pki, options: dict[str, str | bool]) -> str:
    """A `[[listeners]]` table with the test server certificate plus `options`."""
    settings: dict[str, str | bool] = {
        "certfile": pki.server.cert.as_posix(),
        "keyfile": pki.server.key.as_posix(),
        **options,
    }
    lines = ["[[listeners]]", f'host = "{HOST}"', f"port = {port}"]
    for key, value in settings.items():
        lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else repr(value)}")
    return "\n".join(lines) + "\n\n"


def run_tls_broker(
    directory: Path, pki: Pki, acl: str = "", **options: str | bool
) -> Iterator[TlsBroker]:
    """A broker with one TLS listener and, listed after it, the plain one the probe uses."""
    tls_port, plain_port = free_port(), free_port()
    config = write_config(
        directory / "telemq.toml",
        tls_listener_toml(tls_port, pki, options)
        + f'[[listeners]]\nhost = "{HOST}"\nport = {plain_port}\n\n'
        + f'[store]\nkind = "memory"\n\n[limits]\nconnect_timeout = {CONNECT_TIMEOUT}\n\n'
        + acl,
    )
    process = BrokerProcess(
        directory / "broker",
        port=plain_port,
        config=config,
        pass_port=False,
        ready_ports=[plain_port],
    )
    try:
        process.start()
        yield TlsBroker(process, tls_port)
    finally:
        process.finalize()


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsBroker]:
    """TLS with optional client certificates (a CA is set, a certificate is not required)."""
    yield from run_tls_broker(tmp_path_factory.mktemp("tls"), pki, cafile=pki.ca.as_posix())


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsBroker]:
    """TLS that requires a client certificate signed by the test CA."""
    yield from run_tls_broker(
        tmp_path_factory.mktemp("strict"),
        pki,
        cafile=pki.ca.as_posix(),
        require_certificate=True,
    )


IDENTITY_ACL = """
[[acl]]
user = "sensor1"
action = "publish"
topic = "sensors/sensor1/#"

[[acl]]
user = "client1"
action = "subscribe"
topic = "sensors/#"
"""


@pytest.fixture(scope="module")
def identity_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsBroker]:
    """The certificate's CN is the user name; sensor1 may publish only below sensors/sensor1."""
    yield from run_tls_broker(
        tmp_path_factory.mktemp("identity"),
        pki,
        IDENTITY_ACL,
        cafile=pki.ca.as_posix(),
        use_identity_as_username=True,
    )


@pytest.fixture
def subs() -> Iterator[Callable[..., MosquittoSub]]:
    started: list[MosquittoSub] = []

    def make(port: int, topics: list[str], *args: str) -> MosquittoSub:
        sub = MosquittoSub(port, topics, *args)
        started.append(sub)
        return sub

    yield make
    for sub in started:
        sub.kill()


# ---------------------------------------------------------------------------------------------
# TLS with paho-mqtt and the mosquitto clients
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_paho_round_trip_over_tls(
    tls_broker: TlsBroker, pki: Pki, paho_factory: PahoMaker, qos: int
) -> None:
    port = tls_broker.tls_port
    subscriber = tls_paho(paho_factory, port, client_context(pki.ca))
    publisher = tls_paho(paho_factory, port, client_context(pki.ca))
    topic = unique("tls/")
    assert subscriber.subscribe(topic, qos) == [qos]
    for index in range(3):
        publisher.publish(topic, f"m{index}", qos=qos)
    got = subscriber.wait_messages(3, topic=topic)
    assert [(m.payload, m.qos) for m in got] == [(f"m{i}".encode(), qos) for i in range(3)]
    assert f"listening on {HOST}:{port} (MQTT over TLS" in tls_broker.process.log_text()


def test_mosquitto_clients_over_tls(
    tls_broker: TlsBroker, pki: Pki, subs: Callable[..., MosquittoSub]
) -> None:
    port = tls_broker.tls_port
    topic = unique("mosq/")
    sub = subs(port, [topic], "--cafile", str(pki.ca), "-q", "2")
    sub.wait_subscribed()
    for qos in (0, 1, 2):
        mosquitto_pub(port, "--cafile", str(pki.ca), "-t", topic, "-m", f"q{qos}", "-q", str(qos))
    got = sub.wait_messages(3)
    assert [(m.topic, m.payload, m.qos) for m in got] == [(topic, f"q{q}", q) for q in (0, 1, 2)]


def test_client_with_the_wrong_ca_rejects_the_server(
    tls_broker: TlsBroker, pki: Pki, paho_factory: PahoMaker
) -> None:
    port = tls_broker.tls_port
    with pytest.raises(ssl.SSLCertVerificationError):
        TlsRawClient(port, client_context(pki.other_ca))
    client = paho_factory(port)
    client.client.tls_set_context(client_context(pki.other_ca))
    with pytest.raises(ssl.SSLCertVerificationError):
        client.connect()
    assert mosquitto_pub_refused(port, "--cafile", str(pki.other_ca))
    roundtrip(tls_paho(paho_factory, port, client_context(pki.ca)))


def test_plain_tcp_client_on_the_tls_port_fails_and_others_go_on(
    tls_broker: TlsBroker, pki: Pki, paho_factory: PahoMaker
) -> None:
    port = tls_broker.tls_port
    bystander = tls_paho(paho_factory, port, client_context(pki.ca))
    for _ in range(3):
        with socket.create_connection((HOST, port), timeout=10) as plain:
            plain.sendall(connect_packet(unique("plain")))
            received = b""
            while chunk := plain.recv(4096):  # until the broker closes the connection
                received += chunk
        assert not received.startswith(b"\x20"), f"a CONNACK on the TLS port: {received!r}"
    roundtrip(bystander)
    roundtrip(tls_paho(paho_factory, port, client_context(pki.ca)))
    assert "Traceback" not in tls_broker.process.log_text()


def test_silent_connection_on_the_tls_port_is_closed_after_connect_timeout(
    tls_broker: TlsBroker,
) -> None:
    with socket.create_connection((HOST, tls_broker.tls_port), timeout=10) as silent:
        silent.settimeout(CONNECT_TIMEOUT + 8)
        try:
            closed = silent.recv(1) == b""
        except TimeoutError:
            closed = False
        except ConnectionResetError:
            closed = True
    assert closed, "the broker kept a connection that never started the TLS handshake"


def test_tls_and_plain_listeners_share_one_broker(
    tls_broker: TlsBroker, pki: Pki, paho_factory: PahoMaker
) -> None:
    tls_client = tls_paho(paho_factory, tls_broker.tls_port, client_context(pki.ca))
    plain_client = paho_factory(tls_broker.plain_port)
    plain_client.connect()
    topic = unique("both/")
    tls_client.subscribe(topic, 1)
    plain_client.subscribe(topic, 1)
    plain_client.publish(topic, b"from plain", qos=1)
    tls_client.publish(topic, b"from tls", qos=1)
    for client in (tls_client, plain_client):
        got = client.wait_messages(2, topic=topic)
        assert sorted(m.payload for m in got) == [b"from plain", b"from tls"]


def test_optional_client_certificate(tls_broker: TlsBroker, pki: Pki) -> None:
    """With a CA but no require_certificate: none or a valid one is fine, a foreign one is not."""
    port = tls_broker.tls_port
    for pair in (None, pki.sensor1):
        with tls_connected(port, client_context(pki.ca, pair)) as client:
            assert client.is_open()
    refused_by_tls(port, client_context(pki.ca, pki.intruder))


# ---------------------------------------------------------------------------------------------
# require_certificate
# ---------------------------------------------------------------------------------------------


def test_required_certificate_missing_is_refused(strict_broker: TlsBroker, pki: Pki) -> None:
    refused_by_tls(strict_broker.tls_port, client_context(pki.ca))


def test_required_certificate_from_another_ca_is_refused(
    strict_broker: TlsBroker, pki: Pki
) -> None:
    refused_by_tls(strict_broker.tls_port, client_context(pki.ca, pki.intruder))


def test_required_certificate_valid_is_accepted(
    strict_broker: TlsBroker, pki: Pki, paho_factory: PahoMaker
) -> None:
    port = strict_broker.tls_port
    roundtrip(tls_paho(paho_factory, port, client_context(pki.ca, pki.client1)), qos=2)
    topic = unique("strict/")
    output = mosquitto_pub(
        port,
        "--cafile", str(pki.ca), "--cert", str(pki.sensor1.cert), "--key", str(pki.sensor1.key),
        "-t", topic, "-m", "x", "-q", "1", "-d",
    )  # fmt: skip
    assert "PUBACK" in output, output
    assert mosquitto_pub_refused(port, "--cafile", str(pki.ca))


def test_strict_broker_keeps_serving_after_refusals(
    strict_broker: TlsBroker, pki: Pki, paho_factory: PahoMaker
) -> None:
    port = strict_broker.tls_port
    bystander = tls_paho(paho_factory, port, client_context(pki.ca, pki.client1))
    for pair in (None, pki.intruder) * 3:
        refused_by_tls(port, client_context(pki.ca, pair))
    roundtrip(bystander)
    assert "Traceback" not in strict_broker.process.log_text()


# ---------------------------------------------------------------------------------------------
# use_identity_as_username
# ---------------------------------------------------------------------------------------------


def test_identity_without_certificate_gets_not_authorized(
    identity_broker: TlsBroker, pki: Pki
) -> None:
    port = identity_broker.tls_port
    with TlsRawClient(port, client_context(pki.ca)) as client:
        ack = client.connect(unique("nocert"), username="sensor1", password=b"anything")
        assert ack.return_code == CONNACK_NOT_AUTHORIZED
        assert client.wait_closed()


def test_identity_acl_allows_and_denies_by_common_name(
    identity_broker: TlsBroker, pki: Pki
) -> None:
    port = identity_broker.tls_port
    with (
        tls_connected(port, client_context(pki.ca, pki.client1)) as reader,
        tls_connected(port, client_context(pki.ca, pki.sensor1)) as sensor,
    ):
        assert reader.subscribe([("sensors/#", 1)]) == [1]
        # sensor1 has no subscribe rule: refused with 0x80.
        assert sensor.subscribe([("sensors/#", 1)]) == [0x80]
        # The denied publications are acknowledged (3.1.1 has no negative ack) and dropped.
        sensor.publish("sensors/sensor2/temp", b"denied", qos=1)
        sensor.publish("elsewhere", b"denied", qos=1)
        sensor.publish("sensors/sensor1/temp", b"allowed", qos=1)
        sensor.publish("sensors/sensor1/end", b"last", qos=1)
        got = reader.collect(2)
        assert [(m.topic, m.payload) for m in got] == [
            ("sensors/sensor1/temp", b"allowed"),
            ("sensors/sensor1/end", b"last"),
        ]
        assert sensor.is_open()


def test_identity_ignores_the_user_name_the_client_claims(
    identity_broker: TlsBroker, pki: Pki
) -> None:
    """client1 claiming to be sensor1 is still client1: sensor1's rights are not its."""
    port = identity_broker.tls_port
    with (
        tls_connected(port, client_context(pki.ca, pki.client1)) as reader,
        tls_connected(
            port, client_context(pki.ca, pki.client1), username="sensor1", password=b"x"
        ) as impostor,
        tls_connected(port, client_context(pki.ca, pki.sensor1)) as sensor,
    ):
        assert reader.subscribe([("sensors/#", 1)]) == [1]
        impostor.publish("sensors/sensor1/temp", b"forged", qos=1)
        sensor.publish("sensors/sensor1/temp", b"genuine", qos=1)
        assert [m.payload for m in reader.collect(1)] == [b"genuine"]


def test_identity_with_mosquitto_pub(
    identity_broker: TlsBroker, pki: Pki, paho_factory: PahoMaker
) -> None:
    port = identity_broker.tls_port
    reader = tls_paho(paho_factory, port, client_context(pki.ca, pki.client1))
    assert reader.subscribe("sensors/#", 1) == [1]
    for topic in ("sensors/sensor2/temp", "sensors/sensor1/temp"):
        mosquitto_pub(
            port,
            "--cafile", str(pki.ca), "--cert", str(pki.sensor1.cert),
            "--key", str(pki.sensor1.key), "-t", topic, "-m", topic, "-q", "1",
        )  # fmt: skip
    got = reader.wait_messages(1)
    assert [m.topic for m in got] == ["sensors/sensor1/temp"]


def test_plain_listener_of_the_identity_broker_is_unaffected(identity_broker: TlsBroker) -> None:
    with raw_connected(identity_broker.plain_port) as client:
        assert client.is_open()


# ---------------------------------------------------------------------------------------------
# Configuration errors
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BadTls:
    id: str
    options: Callable[[Pki, Path], dict[str, object]]
    expected: tuple[str, ...]  # fragments of the error message


def _garbage(directory: Path) -> str:
    path = directory / "garbage.pem"
    path.write_text("this is not PEM\n")
    return path.as_posix()


BAD_TLS = [
    BadTls(
        "keyfile-without-certfile",
        lambda pki, _: {"keyfile": pki.server.key.as_posix()},
        ("listeners[0].keyfile", "without certfile"),
    ),
    BadTls(
        "require-without-certfile",
        lambda pki, _: {"require_certificate": True},
        ("listeners[0].require_certificate", "without certfile"),
    ),
    BadTls(
        "require-without-cafile",
        lambda pki, _: {**_server(pki), "require_certificate": True},
        ("listeners[0].require_certificate", "needs cafile"),
    ),
    BadTls(
        "identity-without-cafile",
        lambda pki, _: {**_server(pki), "use_identity_as_username": True},
        ("listeners[0].use_identity_as_username", "needs cafile"),
    ),
    BadTls(
        "missing-certfile",
        lambda pki, tmp: {"certfile": (tmp / "nope.pem").as_posix()},
        ("listeners[0].certfile", "cannot read", "nope.pem", "No such file"),
    ),
    BadTls(
        "certfile-not-pem",
        lambda pki, tmp: {"certfile": _garbage(tmp), "keyfile": pki.server.key.as_posix()},
        ("listeners[0].certfile", "garbage.pem", "no valid PEM certificate"),
    ),
    BadTls(
        "certfile-without-key",
        lambda pki, _: {"certfile": pki.server.cert.as_posix()},
        ("listeners[0].certfile", "holds no private key; set keyfile"),
    ),
    BadTls(
        "keyfile-not-pem",
        lambda pki, tmp: {"certfile": pki.server.cert.as_posix(), "keyfile": _garbage(tmp)},
        ("listeners[0].keyfile", "garbage.pem", "no valid PEM private key"),
    ),
    BadTls(
        "key-of-another-certificate",
        lambda pki, _: {
            "certfile": pki.server.cert.as_posix(),
            "keyfile": pki.client1.key.as_posix(),
        },
        ("listeners[0].keyfile", "client1.key", "does not belong to the certificate"),
    ),
    BadTls(
        "encrypted-key",
        lambda pki, _: {
            "certfile": pki.server.cert.as_posix(),
            "keyfile": pki.encrypted_key.as_posix(),
        },
        ("listeners[0].keyfile", "encrypted.key", "pass phrase"),
    ),
    BadTls(
        "cafile-not-a-certificate",
        lambda pki, _: {**_server(pki), "cafile": pki.client1.key.as_posix()},
        ("listeners[0].cafile", "client1.key", "no valid PEM certificate"),
    ),
    BadTls(
        "missing-cafile",
        lambda pki, tmp: {**_server(pki), "cafile": (tmp / "no-ca.pem").as_posix()},
        ("listeners[0].cafile", "cannot read", "no-ca.pem"),
    ),
]


def _server(pki: Pki) -> dict[str, object]:
    return {"certfile": pki.server.cert.as_posix(), "keyfile": pki.server.key.as_posix()}


def _listener_toml(options: dict[str, object]) -> str:
    lines = ["[[listeners]]", f'host = "{HOST}"', f"port = {free_port()}"]
    for key, value in options.items():
        lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else repr(value)}")
    return "\n".join(lines) + '\n\n[store]\nkind = "memory"\n'


@pytest.mark.parametrize("case", BAD_TLS, ids=lambda case: case.id)
def test_bad_tls_settings_stop_serve_with_a_clear_message(
    pki: Pki, tmp_path: Path, case: BadTls
) -> None:
    config = write_config(tmp_path / "telemq.toml", _listener_toml(case.options(pki, tmp_path)))
    result = subprocess.run(
        [sys.executable, "-m", "telemq", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("telemq: configuration error: "), result.stderr
    for fragment in case.expected:
        assert fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_certificate_and_key_in_one_file_is_accepted(pki: Pki, tmp_path: Path) -> None:
    combined = tmp_path / "server-with-key.pem"
    combined.write_bytes(pki.server.cert.read_bytes() + pki.server.key.read_bytes())
    config = config_from_mapping({"listeners": [{"port": 8883, "certfile": str(combined)}]})
    assert config.listeners[0].certfile == str(combined)
    with pytest.raises(ConfigError, match=r"listeners\[0\]\.certfile"):
        config_from_mapping({"listeners": [{"port": 8883, "certfile": str(pki.server.cert)}]})
