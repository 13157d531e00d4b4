"""Where a connection comes from, kept small: an IP address and port packed in one int.

A client's "host:port" as text is 64 bytes of every idle connection; packed (address, port,
then one bit for IPv6) it is a native field of the compiled build, no object at all. The
text is made when asked (logs, the admin API). A peer that is not an IP address (an
in-process connection's name, a scoped IPv6 address) is not packed: its owner asks the
transport for it when needed.
"""

from __future__ import annotations

import socket


def pack_peer(peername: object) -> int:
    """A transport's "peername" as `Client` keeps it: an IP address and port packed in one
    int (address, port, then 1 bit: IPv6), or -1 for one that is not (an in-process
    connection's name, a scoped IPv6 address), whose text `peer_name` reads when asked. An
    IPv4 peer's int is a native field in the compiled build: no object at all."""
    if not isinstance(peername, tuple) or len(peername) < 2:
        return -1
    host, port = peername[0], peername[1]
    if isinstance(host, str) and isinstance(port, int) and 0 <= port <= 0xFFFF:
        for family, version in ((socket.AF_INET, 0), (socket.AF_INET6, 1)):
            try:
                address = int.from_bytes(socket.inet_pton(family, host), "big")
            except OSError:
                continue
            return (address << 17) | (port << 1) | version
    return -1


def peer_text(address: int) -> str:
    """What `pack_peer` packed, as text: "host:port"."""
    port = (address >> 1) & 0xFFFF
    if address & 1:
        host = socket.inet_ntop(socket.AF_INET6, (address >> 17).to_bytes(16, "big"))
    else:
        host = socket.inet_ntop(socket.AF_INET, (address >> 17).to_bytes(4, "big"))
    return f"{host}:{port}"


def peer_name(peername: object) -> str:
    """A "peername" `pack_peer` does not pack, as text: "host:port", or "?" for none."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return "?"
