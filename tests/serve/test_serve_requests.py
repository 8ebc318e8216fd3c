# SPDX-License-Identifier: Apache-2.0
"""``kvviz serve`` against requests no browser would send, and against ends no tab chose:
unknown paths, forged websocket messages and URLs, the cap on sessions, a crashed app,
Ctrl+C and a killed server. The server must stay up where it should, run only the command
it was started with, and leave no process behind.

Spoken to with aiohttp's client (the serve extra's), on 127.0.0.1 only; every wait bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import urllib.error
import urllib.request

import aiohttp
import pytest

from .served import GONE_SECONDS, START_SECONDS, command_line, group_members, poll, served

pytestmark = pytest.mark.slow  # starts kvviz serve and its app processes


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


async def _first_frame(url: str) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as socket:
            async with asyncio.timeout(START_SECONDS):
                while True:
                    message = await socket.receive()
                    assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), message
                    if message.type == aiohttp.WSMsgType.BINARY:
                        return len(message.data)


def first_frame(url: str) -> int:
    """Open ``url``'s websocket, wait (bounded) for the app's first bytes, close; their count."""
    return asyncio.run(_first_frame(url))


@pytest.fixture(scope="module")
def lru_server(tmp_path_factory):
    with served("lru", cwd=tmp_path_factory.mktemp("served-requests")) as server:
        yield server


def ws_url(server, path: str) -> str:
    return server.url.replace("http://", "ws://") + path


@pytest.mark.parametrize("path", [
    "/nope", "/etc/passwd", "/demo/no-such-demo", "/demo/../../etc/passwd", "/demo/lru/../../../etc/passwd",
    "/app", "/ws", "/demo/lru/ws/extra", "/static/../../../../etc/passwd", "/download/not-a-key",
    "/run?file=/etc/passwd", "/static/js/../../server.py",
])
def test_a_path_the_plan_does_not_hold_is_a_404_and_the_server_stays_up(lru_server, path):
    # "/app" too: `kvviz serve lru` serves the demo's own page; no other command has a page.
    assert status_of(lru_server.url + path) == 404
    assert status_of(lru_server.url + "/") == 200


def test_the_static_folder_lists_nothing(lru_server):
    assert status_of(lru_server.url + "/static/") == 403
    assert status_of(lru_server.url + "/static/js/") == 403
    assert status_of(lru_server.url + "/") == 200


def test_forged_messages_and_a_url_naming_another_file_run_only_the_served_command(lru_server):
    expected = [sys.executable, "-m", "kvviz", "demo", "lru"]
    before = lru_server.apps()
    forged = [
        ["open", "/etc/passwd"], ["run", "kvviz run /etc/passwd"], ["command", ["sh", "-c", "touch pwned"]],
        ["resize", {"width": 10**9, "height": -5}], ["resize", "huge"], ["stdin", 12345], ["stdin"],
        ["ping", "x" * 10_000], {"stdin": "q"}, [], "not json at all", b"\x00binary frame",
        ["stdin", "\ud800"],  # a lone surrogate from JSON: not UTF-8, must not break the relay
    ]

    async def scenario():
        url = ws_url(lru_server, "/demo/lru/ws?file=/etc/passwd&command=sh&width=999999999&height=40")
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(url) as socket:
                async with asyncio.timeout(START_SECONDS):
                    while (await socket.receive()).type != aiohttp.WSMsgType.BINARY:
                        pass
                app = lru_server.new_app(before)
                for message in forged:
                    if isinstance(message, bytes):
                        await socket.send_bytes(message)
                    else:
                        await socket.send_str(message if isinstance(message, str) else json.dumps(message))
                # The relay still works after all that: a ping is answered, bounded.
                await socket.send_str(json.dumps(["ping", "still-there"]))
                async with asyncio.timeout(30):
                    while True:
                        message = await socket.receive()
                        if message.type == aiohttp.WSMsgType.TEXT and json.loads(message.data) == ["pong", "still-there"]:
                            break
                assert command_line(app) == expected
                assert lru_server.apps() == before + [app]  # one app, nothing else started
                return app

    app = asyncio.run(scenario())
    poll(lambda: not group_members(app), GONE_SECONDS, "the forged session's app gone after its socket closed")
    assert list(lru_server.output.parent.glob("pwned")) == []
    assert status_of(lru_server.url + "/") == 200


def test_a_crashed_app_closes_its_tab_and_the_server_stays_up(lru_server):
    before = lru_server.apps()

    async def scenario():
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(ws_url(lru_server, "/demo/lru/ws")) as socket:
                async with asyncio.timeout(START_SECONDS):
                    while (await socket.receive()).type != aiohttp.WSMsgType.BINARY:
                        pass
                app = lru_server.new_app(before)
                os.kill(app, signal.SIGKILL)  # the app crashes
                async with asyncio.timeout(GONE_SECONDS):
                    while (await socket.receive()).type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                                                                aiohttp.WSMsgType.CLOSING):
                        pass
                return app

    app = asyncio.run(scenario())
    poll(lambda: not group_members(app), GONE_SECONDS, "the crashed app's group gone")
    assert status_of(lru_server.url + "/") == 200
    assert first_frame(ws_url(lru_server, "/demo/lru/ws")) > 0  # and it still serves


def test_at_the_cap_a_websocket_is_refused_before_any_process_starts(tmp_path):
    with served("lru", cwd=tmp_path, max_sessions=1) as server:
        async def scenario():
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(ws_url(server, "/demo/lru/ws")) as socket:
                    async with asyncio.timeout(START_SECONDS):
                        while (await socket.receive()).type != aiohttp.WSMsgType.BINARY:
                            pass
                    apps = server.apps()
                    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                        async with session.ws_connect(ws_url(server, "/demo/refcount/ws")):
                            pass
                    assert refused.value.status == 503
                    assert status_of(server.url + "/demo/refcount") == 503
                    assert server.apps() == apps  # no second process, not even briefly kept
                    return apps

        (app,) = asyncio.run(scenario())
        poll(lambda: not group_members(app), GONE_SECONDS, "the capped server's one app gone")
        # The server frees the place when its session's handler has seen the app end, which
        # can come a moment after the process group is gone: poll for it, bounded.
        poll(lambda: status_of(server.url + "/") == 200, GONE_SECONDS,
             "the landing page served again once the capped app ended")


def test_ctrl_c_at_the_server_ends_every_app_and_their_groups(tmp_path):
    with served("lru", cwd=tmp_path) as server:
        async def scenario():
            async with aiohttp.ClientSession() as session:
                sockets = [await session.ws_connect(ws_url(server, path)) for path in ("/demo/lru/ws", "/demo/dedup/ws")]
                for socket in sockets:
                    async with asyncio.timeout(START_SECONDS):
                        while (await socket.receive()).type != aiohttp.WSMsgType.BINARY:
                            pass
                apps = poll(lambda: len(server.apps()) == 2 and server.apps(), START_SECONDS, "two apps")
                os.killpg(server.process.pid, signal.SIGINT)  # Ctrl+C: the terminal signals the server's group
                server.process.wait(timeout=GONE_SECONDS)
                return apps

        apps = asyncio.run(scenario())
        assert server.process.returncode == 0, server.text()
        for app in apps:
            assert group_members(app) == [], f"app {app} outlived the server"


def test_a_killed_server_takes_its_apps_with_it(tmp_path):
    with served("lru", cwd=tmp_path) as server:
        async def scenario():
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(ws_url(server, "/demo/lru/ws")) as socket:
                    async with asyncio.timeout(START_SECONDS):
                        while (await socket.receive()).type != aiohttp.WSMsgType.BINARY:
                            pass
                    (app,) = server.apps()
                    os.killpg(server.process.pid, signal.SIGKILL)  # no chance to reap anything
                    server.process.wait(timeout=GONE_SECONDS)
                    return app

        app = asyncio.run(scenario())
        poll(lambda: not group_members(app), GONE_SECONDS, "the app of a SIGKILLed server gone")


def test_with_no_target_the_landing_page_is_home_and_no_app_page_exists(tmp_path):
    with served(cwd=tmp_path) as server:
        with urllib.request.urlopen(server.url + "/", timeout=30) as response:
            home = response.read().decode()
        assert 'href="/demo/lru"' in home and "Lessons" in home and 'id="served"' not in home
        assert status_of(server.url + "/app") == 404
        assert first_frame(ws_url(server, "/demo/refcount/ws")) > 0


def test_a_served_scenario_file_runs_that_file_and_its_landing_page_links_it(tmp_path):
    scenario = tmp_path / "story.kvs"
    scenario.write_text("cache trie pages=4 tokens_per_page=2\n> A tiny story.\nacquire r1 1 2 3\n")
    with served(str(scenario), cwd=tmp_path) as server:
        with urllib.request.urlopen(server.url + "/demos", timeout=30) as response:
            assert 'id="served" href="/app"' in response.read().decode()
        before = server.apps()

        async def scenario_session():
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(ws_url(server, "/app/ws")) as socket:
                    async with asyncio.timeout(START_SECONDS):
                        while (await socket.receive()).type != aiohttp.WSMsgType.BINARY:
                            pass
                    return server.new_app(before)

        app = asyncio.run(scenario_session())
        assert command_line(app) == [sys.executable, "-m", "kvviz", "run", str(scenario.resolve())]
