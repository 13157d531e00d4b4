"""TLS for listeners: the server's SSL context and the identity in a client's certificate.

A listener with a `certfile` speaks MQTT over TLS. With a `cafile`, client certificates
signed by that CA are verified; `require_certificate` refuses the handshake without one;
`use_identity_as_username` makes the certificate's common name the user name (the password
is then not asked for), as Mosquitto's option of the same name does.

Building the context checks every file on its own, so that a mistake is a `ConfigError`
naming the setting, the file and the problem rather than OpenSSL's bare "PEM lib".
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Protocol

from .errors import ConfigError


class DialerTls(Protocol):
    """The TLS files of a link or bridge (`LinkConfig`, `BridgeConfig`), or a listener's."""

    certfile: str
    keyfile: str
    cafile: str


class ListenerTls(DialerTls, Protocol):
    """The TLS settings of a listener (`ListenerConfig`, `HttpConfig.tls_listener()`)."""

    host: str
    port: int
    require_certificate: bool


class _EncryptedKey(Exception):
    """The private key asks for a pass phrase, which telemq has no setting for."""


def _refuse_passphrase() -> bytes:
    """Password callback: fail instead of letting OpenSSL prompt on the terminal."""
    raise _EncryptedKey


def _check_readable(path: str, setting: str) -> None:
    """Fail with the operating system's reason when `path` cannot be read."""
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as error:
        raise ConfigError(f"{setting}: cannot read {path!r}: {error.strerror}") from None


def _check_certificates(path: str, setting: str) -> None:
    """Fail unless `path` holds at least one well-formed PEM certificate."""
    _check_readable(path, setting)
    scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        scratch.load_verify_locations(cafile=path)
    except ssl.SSLError:
        raise ConfigError(
            f"{setting}: {path!r} holds no valid PEM certificate "
            "(expected '-----BEGIN CERTIFICATE-----' blocks)"
        ) from None


def _load_key_pair(context: ssl.SSLContext, listener: DialerTls, where: str) -> None:
    """Load this side's certificate (a server's, or a dialing link's) and its private key
    (from `keyfile` or the certfile)."""
    certfile = listener.certfile
    keyfile = listener.keyfile or certfile
    key_setting = f"{where}.keyfile" if listener.keyfile else f"{where}.certfile"
    if listener.keyfile:
        _check_readable(keyfile, key_setting)
    try:
        context.load_cert_chain(certfile, listener.keyfile or None, password=_refuse_passphrase)
    except _EncryptedKey:
        raise ConfigError(
            f"{key_setting}: the private key in {keyfile!r} is encrypted with a pass phrase; "
            "telemq needs an unencrypted key (e.g. `openssl pkey -in KEY -out KEY.plain`)"
        ) from None
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"{key_setting}: the private key in {keyfile!r} does not belong to the "
                f"certificate in {certfile!r}"
            ) from None
        if not listener.keyfile:
            raise ConfigError(
                f"{key_setting}: {certfile!r} holds no private key; set keyfile"
            ) from None
        raise ConfigError(
            f"{key_setting}: {keyfile!r} holds no valid PEM private key "
            "(expected a '-----BEGIN ... PRIVATE KEY-----' block)"
        ) from None


def server_context(listener: ListenerTls, where: str = "") -> ssl.SSLContext | None:
    """The SSL context of `listener`, or None for plain TCP.

    `where` prefixes error messages (`listeners[1]`); by default the listener's address.
    Raises ConfigError when a file is missing, unreadable or not what its setting expects.
    """
    if not listener.certfile:
        return None
    where = where or f"listeners[{listener.host}:{listener.port}]"
    _check_certificates(listener.certfile, f"{where}.certfile")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_key_pair(context, listener, where)
    if listener.cafile:
        _check_certificates(listener.cafile, f"{where}.cafile")
        context.load_verify_locations(cafile=listener.cafile)
        # CERT_OPTIONAL still fails the handshake on a certificate the CA did not sign.
        context.verify_mode = (
            ssl.CERT_REQUIRED if listener.require_certificate else ssl.CERT_OPTIONAL
        )
    return context


def client_context(dialer: DialerTls, where: str) -> ssl.SSLContext | None:
    """The SSL context a link or bridge dials with (None: plain TCP): the server is verified
    against `cafile`, its name against `server_name` (or host); `certfile` is this broker's
    own certificate, for a listener that asks for one."""
    if not dialer.cafile:
        return None
    _check_certificates(dialer.cafile, f"{where}.cafile")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=dialer.cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if dialer.certfile:
        _check_certificates(dialer.certfile, f"{where}.certfile")
        _load_key_pair(context, dialer, where)
    return context


def certificate_identity(transport: asyncio.BaseTransport) -> str | None:
    """The common name of the client's verified certificate, if it sent one."""
    certificate = transport.get_extra_info("peercert")
    if not certificate:
        return None
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
