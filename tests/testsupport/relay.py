"""`Relay`: a TCP relay on 127.0.0.1 that a test can cut, to make a link between two brokers
fail on purpose (the dialing broker connects to the relay, which connects on to the other).

`cut()` drops every connection through it at once (both sockets shut down, as when a
network path fails); `cut(half_open=True)` closes only the dialing side's end, so the
other end goes on believing in the connection (a half-open TCP connection, as a crashed
router leaves). `blocked = True` makes it refuse new connections until set back.
`blackholed = True` makes it swallow every byte, both ways, of the connections through it
and of new ones, while every socket stays open (a path that loses packets without resetting
anything: each end's TCP stack still sees its peer, the relay's, acknowledge). It runs in
daemon threads and stops with `close()`.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from .process import HOST


class Relay:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.blocked = False
        self.blackholed = False
        self.connections = 0  # accepted and relayed so far
        self.accepted = 0  # accepted so far, relayed or not
        self._server = socket.create_server((HOST, 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._dialing_ends: list[socket.socket] = []
        self._half_open: set[socket.socket] = set()  # dialing ends cut with half_open
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            if self.blocked:
                downstream.close()
                continue
            if self.blackholed:  # accepted, and never heard of again
                with self._lock:
                    self._open.append(downstream)
                threading.Thread(target=self._pump, args=(downstream, None), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection((HOST, self.target_port), timeout=5)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open += [downstream, upstream]
                self._dialing_ends.append(downstream)
                self.connections += 1
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket | None) -> None:
        try:
            while data := source.recv(65536):
                if sink is not None and not self.blackholed:
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            if sink is None:
                self._drop(source)
            elif source not in self._half_open and sink not in self._half_open:
                self._drop(source, sink)

    def _drop(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
            with self._lock:
                if sock in self._open:
                    self._open.remove(sock)

    def cut(self, half_open: bool = False) -> None:
        """Drop every connection through the relay now (only the dialing ends with
        `half_open`)."""
        with self._lock:
            current = list(self._dialing_ends if half_open else self._open)
            self._dialing_ends = []
        if half_open:
            for sock in current:
                self._half_open.add(sock)  # its pumps end without touching the other end
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            return
        self._drop(*current)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()
        self.cut()
