"""The explorer's server sockets: a kept-alive connection's answers go out without Nagle's wait."""

from __future__ import annotations

import http.client
import socket
from urllib.parse import urlparse

from explore_fixtures import open_world_session
from weightgraft.explore.server import ServerThread, bind


def test_the_listening_socket_is_tcp_without_nagle():
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()


def test_an_accepted_connection_has_tcp_nodelay(root):
    """Before: the socket was made with proto 0, asyncio then left Nagle's algorithm on for accepted
    connections, and each kept-alive answer waited ~44 ms for the client's delayed ACK."""
    server = ServerThread(open_world_session(root))
    url = urlparse(server.start())
    try:
        client = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        for _ in range(2):  # kept alive: the second request reuses the connection
            client.request("GET", "/api/info")
            assert client.getresponse().read()
        connections = list(server.server.server_state.connections)
        assert len(connections) == 1
        accepted = connections[0].transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        client.close()
    finally:
        server.stop()
