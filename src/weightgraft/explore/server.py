"""Serving the explorer with uvicorn: in the foreground (the command) or in a thread (tests,
benchmarks, a notebook)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from weightgraft.errors import UserError
from weightgraft.explore.api import create_app
from weightgraft.explore.session import ExploreSession

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def allowed_hosts(host: str) -> list[str] | None:
    """Host headers to answer: loopback names when bound to loopback, else any (the user chose to
    serve beyond this machine)."""
    return None if host in LOOPBACK else ["*"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or a plain error line when the address is taken or not this machine's.

    Made with proto IPPROTO_TCP and TCP_NODELAY: asyncio sets TCP_NODELAY on an accepted socket
    only when its proto says TCP, and one made with proto 0 kept Nagle's algorithm, so an answer's
    body waited for the ACK of its headers (the client's delayed ACK): 44 ms a kept-alive request.
    Accepted sockets inherit the option from the listening one on Linux, too."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port} ({err.strerror}); pass another --port (0: any free one) or --host"
        ) from None
    sock.listen(128)
    return sock


def address(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def _server(session: ExploreSession, host: str) -> uvicorn.Server:
    app = create_app(session, allowed_hosts(host))
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))


class ServerThread:
    """The explorer served from a daemon thread: `start()` returns its address, `stop()` ends it."""

    def __init__(self, session: ExploreSession, host: str = "127.0.0.1", port: int = 0):
        self.socket = bind(host, port)
        self.url = address(host, self.socket.getsockname()[1])
        self.server = _server(session, host)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True, name="weightgraft-explore"
        )

    def start(self, timeout: float = 30.0) -> str:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the explorer's server did not start")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()


def serve(session: ExploreSession, host: str, port: int, announce=print) -> None:
    """Serve until Ctrl-C; `announce` gets the address line as soon as the socket listens."""
    sock = bind(host, port)
    announce(f"weightgraft explore: open {address(host, sock.getsockname()[1])} (Ctrl-C stops it)")
    try:
        _server(session, host).run(sockets=[sock])
    finally:
        sock.close()
