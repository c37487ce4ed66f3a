"""An Azure Load Balancer inbound NAT rule in front of a twin node: one frontend port on the
controller's side, forwarding each connection to the node's sshd.

The twin's own ports (``docker run -p``) close every connection when a container goes: the
controller's ssh then learns at once that the node is gone. A load balancer does not. When
AmlCompute replaces the VM behind a NAT rule, the packets of a connection made to the old VM
are dropped: no FIN, no RST. A client holding such a connection (an ssh ControlPersist
master) only finds out when its keepalives go unanswered. ``drop_flows`` does that to the
connections open now; new ones reach whatever answers at the backend port then.
"""

from __future__ import annotations

import socket
import threading


class NatRule:
    def __init__(self, backend: tuple[str, int], address: str = "127.0.0.1") -> None:
        self.backend = backend
        self._listener = socket.create_server((address, 0))
        self.address, self.port = self._listener.getsockname()[:2]
        self._flows: list[_Flow] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _unused = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.backend, timeout=5)
            except OSError:
                client.close()
                continue
            flow = _Flow(client, server)
            with self._lock:
                self._flows.append(flow)
            flow.start()

    def drop_flows(self) -> int:
        """Every open connection goes silent both ways and stays open; returns how many."""
        with self._lock:
            live = [f for f in self._flows if not f.done.is_set()]
        for flow in live:
            flow.silent.set()
        return len(live)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            flows, self._flows = self._flows, []
        for flow in flows:
            flow.close()


class _Flow:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.silent = threading.Event()
        self.done = threading.Event()

    def start(self) -> None:
        for src, dst in ((self.client, self.server), (self.server, self.client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.2)
        while not self.silent.is_set():
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if self.silent.is_set():
                return  # dropped, as the balancer drops it: nothing forwarded, nothing closed
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        if not self.silent.is_set():
            self.done.set()
            for s in (self.client, self.server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.silent.set()
        for s in (self.client, self.server):
            s.close()
