# SPDX-License-Identifier: Apache-2.0
"""``kvviz serve`` under a flood of half-sent requests (a slowloris): connections past the cap
are answered 503 and closed at once, a connection that does not finish its request head in
time is closed, and a whole request is served all along. An in-process server on a free
127.0.0.1 port, a bounded number of sockets, every wait bounded by a socket timeout."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.request

import pytest

from kvviz.serve.plan import ServedPage, ServePlan
from kvviz.serve.server import KvvizServer

HALF_SENT = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # no end of head, ever
BOUND = 30.0  # seconds any one wait may take on a loaded machine


@pytest.fixture
def server():
    """A server with a cap of 40 connections and 1 s for a request head, on its own loop."""
    plan = ServePlan(pages=(ServedPage("/app", "app", "t", "s", ("true",)),), home=None, version="0")
    kvviz = KvvizServer(plan, port=0, max_sessions=1, max_connections=40, head_seconds=1.0)
    ready = threading.Event()
    thread = threading.Thread(target=lambda: asyncio.run(kvviz.run(lambda port: ready.set())), daemon=True)
    thread.start()
    assert ready.wait(BOUND)
    try:
        yield kvviz
    finally:
        kvviz.loop.call_soon_threadsafe(kvviz.request_stop)
        thread.join(BOUND)
        assert not thread.is_alive()


def half_sent(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    sock.sendall(HALF_SENT)
    return sock


def closed_by_server(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes ``sock`` (bounded by the socket's timeout)."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def landing_status(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/demos", timeout=BOUND) as response:
        return response.status


def whole_request(port: int) -> tuple[socket.socket, bytes]:
    """A keep-alive connection that sent a whole request and read the reply's head."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    sock.sendall(b"GET /demos HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(4096)
    return sock, reply


def test_at_the_cap_a_new_connection_takes_the_place_of_the_oldest_half_sent_one(server):
    flood = [half_sent(server.port) for _ in range(60)]  # 20 past the cap of 40
    try:
        for sock in flood[:20]:  # the oldest made room for the newest, at once, without a reply
            assert closed_by_server(sock) == b""
        assert landing_status(server.port) == 200  # a whole request is served at the cap too
        assert server.guard.shed == 21
        for sock in flood[20:]:  # the rest: closed when their second for a head ran out
            assert closed_by_server(sock) == b""
        assert server.guard.timed_out >= 38 and server.guard.refused == 0
    finally:
        for sock in flood:
            sock.close()


def test_when_every_connection_is_a_request_under_way_one_more_is_answered_503(server):
    held = [whole_request(server.port) for _ in range(40)]
    try:
        assert all(reply.startswith(b"HTTP/1.1 200") for _, reply in held)
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=BOUND)
        assert closed_by_server(extra).startswith(b"HTTP/1.1 503")
        assert server.guard.refused == 1
    finally:
        for sock, _ in held:
            sock.close()


def test_a_whole_request_is_served_while_half_sent_ones_hold_connections(server):
    flood = [half_sent(server.port) for _ in range(30)]  # under the cap: room for more
    try:
        assert landing_status(server.port) == 200
        assert landing_status(server.port) == 200  # keep-alive or not, again
    finally:
        for sock in flood:
            sock.close()
