"""Broker networks, the pure parts: topology and cycles, proxy-subscription counts, the link
envelope and control messages (docs/network.md). No sockets, no broker state: `broker.links`
drives them."""
