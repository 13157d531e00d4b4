"""TLS for listeners: the server's SSL context and the identity in a client's certificate.

A listener with a `certfile` speaks MQTT over TLS. With a `cafile`, client certificates
signed by that CA are verified; `require_certificate` refuses the handshake without one;
`use_identity_as_username` makes the certificate's common name the user name (the password
is then not asked for), as Mosquitto's option of the same name does.
"""

from __future__ import annotations

import asyncio
import ssl

from .config import ListenerConfig


def server_context(listener: ListenerConfig) -> ssl.SSLContext | None:
    """The SSL context of `listener`, or None for plain TCP."""
    if not listener.certfile:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(listener.certfile, listener.keyfile or None)
    if listener.cafile:
        context.load_verify_locations(cafile=listener.cafile)
        context.verify_mode = (
            ssl.CERT_REQUIRED if listener.require_certificate else ssl.CERT_OPTIONAL
        )
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
