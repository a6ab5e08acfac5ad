"""A PostgreSQL proxy the tests control, for faults a real deployment sees: a reply lost after
its statement committed, a connection cut. It forwards a Unix socket to the real server (over
its Unix socket or TCP) byte for byte, in threads, so in-process and subprocess workers can use
it alike. Links are told apart by the `application_name` in their startup packet.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import tempfile
import threading
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo


def _startup_params(packet: bytes) -> dict[str, str]:
    if len(packet) < 8:
        return {}
    fields = packet[8:].split(b"\0")
    pairs = zip(fields[0::2], fields[1::2], strict=False)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs if k}


class _Link:
    def __init__(self, client: socket.socket, server: socket.socket, app: str) -> None:
        self.client = client
        self.server = server
        self.app = app
        self.dropping = False

    def close(self) -> None:
        for s in (self.client, self.server):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()


#: A claim's rows have 8 columns or more; the scheduler's read of the clock has 4.
CLAIM_WIDER_THAN = 4


class PgProxy:
    """`dsn` reaches the server through the proxy; `lose_next_reply(app)` makes the next
    request of a link whose application_name contains `app` reach the server (and run there),
    while its reply never comes back: the link is cut instead. `lose_next_rows(app)` does the
    same to the next reply that carries rows of more than CLAIM_WIDER_THAN columns (a claim that
    found jobs, not an idle poll nor the scheduler's four-column read of the database's clock);
    `hold(app)` keeps such a link's replies back until `release()`."""

    def __init__(self, upstream_dsn: str) -> None:
        params = conninfo_to_dict(upstream_dsn)
        host = str(params.get("host") or "/tmp")
        port = int(params.get("port") or 5432)
        self._upstream: tuple[int, object] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
            if host.startswith("/")
            else (socket.AF_INET, (host, port))
        )
        self._dir = tempfile.mkdtemp(prefix="pgq-proxy-")
        self._path = str(Path(self._dir) / ".s.PGSQL.5432")
        self.dsn = make_conninfo(upstream_dsn, host=self._dir, port="5432")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self._path)
        self._listener.listen(64)
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._armed: list[str] = []
        self._armed_rows: list[str] = []
        #: links whose replies are held (`hold`), by application_name part
        self._held: list[str] = []
        self._released = threading.Condition(self._lock)
        self.lost_replies = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_next_reply(self, app: str) -> None:
        with self._lock:
            self._armed.append(app)

    def lose_next_rows(self, app: str) -> None:
        with self._lock:
            self._armed_rows.append(app)

    def hold(self, app: str) -> None:
        """Hold the replies of links whose application_name contains `app` until `release`:
        their requests still reach the server and run, but the client waits, as on a network
        that stopped answering."""
        with self._lock:
            self._held.append(app)

    def release(self) -> None:
        """Let the held replies through."""
        with self._lock:
            self._held.clear()
            self._released.notify_all()

    def cut(self, app: str = "") -> None:
        """Close every link whose application_name contains `app` (all, by default)."""
        with self._lock:
            doomed = [link for link in self._links if app in link.app]
        for link in doomed:
            link.close()

    def close(self) -> None:
        """Cut every link and take no more: the server is gone for good."""
        self._closed = True
        self.release()
        with contextlib.suppress(OSError):  # wakes an accept() in flight, which close() alone
            self._listener.shutdown(socket.SHUT_RDWR)  # leaves taking connections
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        family, address = self._upstream
        server = socket.socket(family, socket.SOCK_STREAM)
        try:
            server.connect(address)  # type: ignore[arg-type]
            head = client.recv(4, socket.MSG_WAITALL)
            (length,) = struct.unpack("!i", head)
            rest = client.recv(length - 4, socket.MSG_WAITALL)
        except (OSError, struct.error):
            client.close()
            server.close()
            return
        link = _Link(client, server, _startup_params(head + rest).get("application_name", ""))
        with self._lock:
            self._links.append(link)
        server.sendall(head + rest)
        threading.Thread(target=self._pump_requests, args=(link,), daemon=True).start()
        self._pump_replies(link)

    def _pump_requests(self, link: _Link) -> None:
        """Client to server; an armed `lose_next_reply` lets one request through, then the
        link's replies stop and the link is cut."""
        try:
            while data := link.client.recv(65536):
                if link.dropping:
                    return
                if self._arm_matches(link):
                    link.dropping = True
                    link.server.sendall(data)
                    self.lost_replies += 1
                    threading.Timer(0.2, link.close).start()
                    return
                link.server.sendall(data)
        except OSError:
            pass
        finally:
            if not link.dropping:
                link.close()

    def _pump_replies(self, link: _Link) -> None:
        """Server to client, a whole protocol message at a time (type byte, then a length
        that counts itself), so that a reply with rows can be told and lost."""
        pending = b""
        try:
            while data := link.server.recv(65536):
                if link.dropping:
                    return
                pending += data
                out = bytearray()
                while len(pending) >= 5:
                    (length,) = struct.unpack("!i", pending[1:5])
                    if len(pending) < 1 + length:
                        break
                    message, pending = pending[: 1 + length], pending[1 + length :]
                    if (
                        message[:1] == b"D"
                        and struct.unpack("!h", message[5:7])[0] > CLAIM_WIDER_THAN
                        and self._arm_matches(link, rows=True)
                    ):
                        link.dropping = True
                        self.lost_replies += 1
                        threading.Timer(0.2, link.close).start()
                        return
                    out += message
                with self._lock:
                    while not self._closed and any(app in link.app for app in self._held):
                        self._released.wait(0.1)
                link.client.sendall(out)
        except OSError:
            pass
        finally:
            if not link.dropping:
                link.close()

    def _arm_matches(self, link: _Link, rows: bool = False) -> bool:
        with self._lock:
            armed = self._armed_rows if rows else self._armed
            for app in armed:
                if app in link.app:
                    armed.remove(app)
                    return True
        return False
