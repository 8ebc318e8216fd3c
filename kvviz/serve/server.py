# SPDX-License-Identifier: Apache-2.0
"""The ``kvviz serve`` web server: textual-serve's, with the kvviz plan, pages and limits.

Routes, all made at start from the :class:`~kvviz.serve.plan.ServePlan` (nothing else is
served; any other path is a 404):

    /                   the served command's page, or the landing page when none was named
    /demos              the landing page: the demos, the kvviz version, the keys
    PAGE                each served page (``/app``, ``/demo/NAME``): textual-serve's terminal
    PAGE/ws             its websocket: one app process per connection, the page's argv
    /download/KEY       a download the tab's app offered (textual-serve's)
    /static/...         textual.js, xterm.css and the Roboto Mono font (textual-serve's files)

At most ``max_sessions`` apps run at once: past that a page is the "every session is taken"
page (503) and a websocket is refused (503) before any process starts. Messages from a tab
are keys, resizes, pings, focus and blur; anything else is ignored, and sizes are bounded.

Connections are bounded before aiohttp sees them (:class:`ConnectionGuard`): at most
``max_sessions`` + :data:`SPARE_CONNECTIONS` open at once, and one that has not sent a whole
request head within :data:`HEAD_SECONDS` is closed; an idle keep-alive connection is closed
after :data:`KEEPALIVE_SECONDS`. At the cap a new connection takes the place of the oldest one
still sending its head (a browser sends its head at once: the oldest is the slowest), and is
answered 503 only when every connection is a request under way. Thousands of half-sent
requests (a slowloris) then cost a bounded number of sockets for a bounded time, and whole
requests are served all along.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import aiohttp_jinja2
import jinja2
from aiohttp import WSCloseCode, WSMsgType, web
from textual_serve.server import Server

from kvviz.serve.plan import ServedPage, ServePlan
from kvviz.serve.sessions import GroupedAppService, kill_group_now

log = logging.getLogger("kvviz.serve")

TEMPLATES = Path(__file__).resolve().parent / "templates"

MAX_MESSAGE_BYTES = 1024 * 1024
"""The largest websocket message a tab may send (a paste into the command bar is a few KB)."""

MAX_COLUMNS, MAX_ROWS = 1000, 400
"""The largest terminal a tab may ask for: a forged ``width=10**9`` must not size a screen."""

FONT_SIZES = range(8, 41)
"""The ``?fontsize=`` a page takes (a projector may want 28); others fall back to 16."""

HEAD_SECONDS = 10.0
"""Seconds a new connection has to send a whole request head (a browser sends it at once)."""

KEEPALIVE_SECONDS = 15.0
"""Seconds an idle keep-alive connection is kept (aiohttp's default is an hour)."""

SPARE_CONNECTIONS = 256
"""Connections allowed besides one websocket per session: pages, static files, downloads."""

_TOO_MANY = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
             b"Content-Length: 39\r\n\r\nkvviz serve: too many open connections\n")

HEARTBEAT = 15.0
"""Seconds between websocket pings: a tab whose browser vanished without closing the socket
is noticed within two of them, and its app ended."""


def _bounded(text: str | None, default: int, allowed: range) -> int:
    try:
        value = int(text) if text is not None else default
    except ValueError:
        return default
    return value if value in allowed else default


def _clamped(value, low: int, high: int, default: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        return default
    return max(low, min(high, value))


class _GuardedProtocol(asyncio.Protocol):
    """One connection: aiohttp's protocol inside, the guard's cap and head timer around it."""

    def __init__(self, guard: "ConnectionGuard", inner: asyncio.Protocol) -> None:
        self.guard, self.inner = guard, inner
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""  # the last bytes seen, to find a head's end split across reads
        self.admitted = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        guard = self.guard
        if guard.open >= guard.max_connections and not guard.shed_oldest_head():
            guard.refused += 1
            transport.write(_TOO_MANY)
            transport.close()
            return
        self.admitted = True
        guard.open += 1
        guard.in_head[self] = None
        self.timer = asyncio.get_running_loop().call_later(guard.head_seconds, self._too_slow)
        self.inner.connection_made(transport)

    def _too_slow(self) -> None:
        self.guard.timed_out += 1
        self.drop()

    def drop(self) -> None:
        """Close a connection still sending its head (too slow, or shed at the cap)."""
        self.guard.in_head.pop(self, None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        if self.timer is not None:
            seen = self.tail + data[:4096]
            if b"\r\n\r\n" in seen:  # a whole head: aiohttp's own limits and timeouts take it from here
                self.timer.cancel()
                self.timer = None
                self.guard.in_head.pop(self, None)
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.guard.in_head.pop(self, None)
        if self.admitted:
            self.guard.open -= 1
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()


class ConnectionGuard:
    """A protocol factory around aiohttp's: at most ``max_connections`` open at once, and each
    closed unless its first request head is whole within ``head_seconds`` (module doc)."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], max_connections: int, head_seconds: float) -> None:
        self.factory, self.max_connections, self.head_seconds = factory, max_connections, head_seconds
        self.open = 0  # admitted and not yet lost (a shed one counts until its loss is reported)
        self.in_head: dict[_GuardedProtocol, None] = {}  # still sending their head, oldest first
        self.refused = 0
        self.timed_out = 0
        self.shed = 0

    def __call__(self) -> asyncio.Protocol:
        return _GuardedProtocol(self, self.factory())

    def shed_oldest_head(self) -> bool:
        """Close the oldest connection still sending its head to make room; False when none is."""
        if not self.in_head:
            return False
        oldest = next(iter(self.in_head))
        self.shed += 1
        oldest.drop()
        self.open -= 1  # its place is taken now; its loss, reported later, is not counted again
        oldest.admitted = False
        oldest.inner.connection_lost(None)
        return True


class KvvizServer(Server):
    """Serve ``plan`` on ``host``:``port`` (0: any free port, see :attr:`port` once started)
    with at most ``max_sessions`` app processes at once (see the module doc)."""

    def __init__(self, plan: ServePlan, *, host: str = "127.0.0.1", port: int = 8000, max_sessions: int = 32,
                 head_seconds: float = HEAD_SECONDS, max_connections: int | None = None):
        super().__init__(plan.served or "kvviz", host=host, port=port, title="kvviz", templates_path=TEMPLATES)
        self.plan = plan
        self.max_sessions = max_sessions
        self.head_seconds = head_seconds
        self.max_connections = max_sessions + SPARE_CONNECTIONS if max_connections is None else max_connections
        self.guard: ConnectionGuard | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop run() runs on
        self.sessions: dict[GroupedAppService, web.WebSocketResponse] = {}
        self.live = 0  # sockets admitted: their app is starting, running or being ended
        self._stop: asyncio.Event | None = None

    # -- the web application -------------------------------------------------------------------

    def make_web_app(self) -> web.Application:
        """The aiohttp application: exactly the plan's routes (module doc)."""
        app = web.Application(client_max_size=64 * 1024)  # no route takes a body
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
        routes = [web.get("/", self.handle_home), web.get("/demos", self.handle_landing)]
        for page in self.plan.pages:
            routes.append(web.get(page.path, self._page_handler(page)))
            routes.append(web.get(page.socket_path, self._socket_handler(page)))
        routes.append(web.get("/download/{key}", self.handle_download))
        routes.append(web.static("/static", self.statics_path, show_index=False))
        app.add_routes(routes)
        app.on_shutdown.append(self.on_shutdown)
        return app

    async def _make_app(self) -> web.Application:  # textual-serve's name, for its serve()
        return self.make_web_app()

    def _page_handler(self, page: ServedPage):
        async def handle(request: web.Request) -> web.StreamResponse:
            return self.page_response(page, request)
        return handle

    def _socket_handler(self, page: ServedPage):
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self.handle_socket(page, request)
        return handle

    @property
    def full(self) -> bool:
        """Whether every session is taken."""
        return self.live >= self.max_sessions

    async def handle_home(self, request: web.Request) -> web.StreamResponse:
        """``/``: the served command's page, or the landing page."""
        if self.plan.home is not None:
            return self.page_response(self.plan.home, request)
        return await self.handle_landing(request)

    async def handle_landing(self, request: web.Request) -> web.StreamResponse:
        """The landing page: the served command, the demos, the kvviz version, the keys."""
        context = {"version": self.plan.version, "served": self.plan.home, "sections": self.plan.sections()}
        return aiohttp_jinja2.render_template("landing.html", request, context)

    def page_response(self, page: ServedPage, request: web.Request) -> web.StreamResponse:
        """A tab's page for ``page``, or the "every session is taken" page (503)."""
        if self.full:
            context = {"max_sessions": self.max_sessions, "again": request.path}
            return aiohttp_jinja2.render_template("full.html", request, context, status=503)
        scheme = "wss" if request.secure else "ws"
        context = {
            "title": f"kvviz · {page.title}",
            # The page's own host, as the browser named it: the socket goes where the page came from.
            "socket_url": f"{scheme}://{request.host}{page.socket_path}",
            "font_size": _bounded(request.query.get("fontsize"), 16, FONT_SIZES),
        }
        return aiohttp_jinja2.render_template("app.html", request, context)

    # -- one tab's session ----------------------------------------------------------------------

    async def handle_socket(self, page: ServedPage, request: web.Request) -> web.StreamResponse:
        """One tab: start ``page``'s command in a process group of its own, relay its frames
        and the tab's keys, and end the group when either side goes."""
        if self.full:
            raise web.HTTPServiceUnavailable(text=f"every session is taken (at most {self.max_sessions})")
        self.live += 1
        service: GroupedAppService | None = None
        websocket = web.WebSocketResponse(heartbeat=HEARTBEAT, max_msg_size=MAX_MESSAGE_BYTES)
        try:
            await websocket.prepare(request)
            width = _bounded(request.query.get("width"), 80, range(1, MAX_COLUMNS + 1))
            height = _bounded(request.query.get("height"), 24, range(1, MAX_ROWS + 1))
            service = GroupedAppService(page.argv, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                                        close=websocket.close, download_manager=self.download_manager)
            self.sessions[service] = websocket
            await service.start(width, height)
            await self.relay_messages(websocket, service)
        except Exception as error:  # one tab's failure is logged, never the server's end
            log.warning("session %s ended: %s", page.path, error)
        finally:
            if service is not None:
                # Shielded: a cancelled handler (server shutdown) still ends its group.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(service.stop())
                self.sessions.pop(service, None)
            self.live -= 1
        return websocket

    async def relay_messages(self, websocket: web.WebSocketResponse, service: GroupedAppService) -> None:
        """Hand the tab's keys and resizes to its app until the socket closes. Only the
        envelopes textual.js sends are read, each checked; anything else is dropped."""
        async for message in websocket:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                envelope = json.loads(message.data)
            except ValueError:
                continue
            if not (isinstance(envelope, list) and envelope and isinstance(envelope[0], str)):
                continue
            kind, data = envelope[0], (envelope[1] if len(envelope) > 1 else None)
            if kind == "stdin" and isinstance(data, str):
                await service.send_bytes(data.encode("utf-8", "replace"))
            elif kind == "resize" and isinstance(data, dict):
                await service.set_terminal_size(_clamped(data.get("width"), 1, MAX_COLUMNS, 80),
                                                _clamped(data.get("height"), 1, MAX_ROWS, 24))
            elif kind == "ping" and isinstance(data, str):
                await websocket.send_json(["pong", data[:32]])
            elif kind == "blur":
                await service.blur()
            elif kind == "focus":
                await service.focus()

    # -- start and stop -------------------------------------------------------------------------

    async def on_shutdown(self, app: web.Application) -> None:
        """The server stops: end every session's group (at once, each bounded), then close
        the tabs' sockets."""
        services = list(self.sessions)
        await asyncio.gather(*(service.stop() for service in services), return_exceptions=True)
        for websocket in list(self.sessions.values()):
            with contextlib.suppress(Exception):
                await websocket.close(code=WSCloseCode.GOING_AWAY, message=b"server stopped")

    async def run(self, ready: Callable[[int], None] | None = None) -> None:
        """Listen until SIGINT, SIGTERM or SIGHUP, then end every session; ``ready(port)`` is
        called once listening (the port is the real one when 0 was asked for)."""
        self._stop = asyncio.Event()
        loop = self.loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(signum, self._stop.set)
        runner = web.AppRunner(self.make_web_app(), access_log=None, shutdown_timeout=5.0,
                               keepalive_timeout=KEEPALIVE_SECONDS)
        await runner.setup()
        listening: asyncio.AbstractServer | None = None
        try:
            # aiohttp's TCPSite, with the guard between the socket and aiohttp's protocol.
            self.guard = ConnectionGuard(runner.server, self.max_connections, self.head_seconds)
            listening = await loop.create_server(self.guard, self.host, self.port, reuse_address=True)
            self.port = listening.sockets[0].getsockname()[1]
            if ready is not None:
                ready(self.port)
            await self._stop.wait()
        finally:
            if listening is not None:
                listening.close()
            await runner.cleanup()
            for service in list(self.sessions):  # none should be left; none may outlive us
                if service.pid is not None:
                    kill_group_now(service.pid)

    def request_stop(self) -> None:
        """Stop the server as SIGINT would (for callers on its loop)."""
        if self._stop is not None:
            self._stop.set()

    def serve(self, debug: bool = False, ready: Callable[[int], None] | None = None) -> None:
        """Run the server until it is told to stop (see :meth:`run`)."""
        asyncio.run(self.run(ready))
