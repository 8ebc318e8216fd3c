# SPDX-License-Identifier: Apache-2.0
"""``kvviz serve`` in a real browser: the system's headless Chromium, driven by Playwright.

One browser for the module (a launch is seconds on a shared core), a page per test. The
app draws on a canvas, so the step is read where the served app puts it: the terminal's
title, which the page copies to the tab's title and a ``role=status`` element. Every wait
polls with a bound (Playwright's ``wait_for_function``, or :func:`~tests.serve.served.poll`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvviz.core.demos import demo_names

from .served import CHROMIUM, GONE_SECONDS, START_SECONDS, group_members, kill_group, poll, served

pytestmark = pytest.mark.slow  # drives a real browser

FIRST_FRAME_MS = int(START_SECONDS * 1000)
STEP_MS = 30_000


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (the system's, from apt: no browser download), one per module."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # a failure, not a skip: CI installs the serve-test extra
        pytest.fail("the serve tests need Playwright: pip install -e '.[serve,serve-test]'")
    if not Path(CHROMIUM).exists():
        pytest.fail("the serve tests need Chromium: apt-get install -y chromium (.ci/run installs it)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def lru_server(tmp_path_factory):
    """``kvviz serve lru``, run in an empty folder (so a file written there would show)."""
    folder = tmp_path_factory.mktemp("served-lru")
    with served("lru", cwd=folder) as server:
        yield server


@pytest.fixture
def context(browser):
    """A browser context per test (its own cookies, downloads and pages), closed after it."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    try:
        yield context
    finally:
        context.close()


def step_shown(page) -> tuple[int, int]:
    """(step, last step) as the tab's title says it."""
    match = re.search(r"· step (\d+) of (\d+)", page.title())
    assert match, page.title()
    return int(match.group(1)), int(match.group(2))


def wait_for_step(page, step: int, timeout: int = STEP_MS) -> None:
    page.wait_for_function(f"/· step {step} of \\d+/.test(document.title)", timeout=timeout)


def poll_in_browser(page, condition, seconds: float, what: str):
    """:func:`poll` that lets Playwright deliver its events while it waits (its sync API
    runs their handlers only inside its own calls, so the pause is ``wait_for_timeout``)."""
    return poll(condition, seconds, what, pause=lambda: page.wait_for_timeout(50))


def open_app(page, url: str) -> None:
    """Go to a served app's page, wait for its first frame (the title says step 0 and the
    terminal has bytes), and give the terminal the keyboard."""
    page.goto(url)
    wait_for_step(page, 0, timeout=FIRST_FRAME_MS)
    page.wait_for_selector("body.-first-byte", timeout=FIRST_FRAME_MS)
    page.focus(".xterm-helper-textarea")


def test_the_landing_page_links_every_demo_and_shows_the_version_and_the_keys(context, lru_server):
    from importlib.metadata import version

    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{lru_server.url}/demos")
    links = {a.get_attribute("href") for a in page.locator("ul.pages a").all()}
    assert links == {f"/demo/{name}" for name in demo_names()}
    assert f"kvviz {version('kvviz')}" in page.locator(".version").inner_text()
    assert "→" in page.locator("#keys").inner_text() and "download" in page.locator("#keys").inner_text()
    page.locator('ul.pages a[href="/demo/refcount"]').click()  # a link opens its demo
    wait_for_step(page, 0, timeout=FIRST_FRAME_MS)
    assert "Ref" in page.title() or "ref" in page.title(), page.title()
    assert page.locator("#kvviz-status").inner_text() == page.title()  # the accessible copy
    assert requests and all(url.startswith(lru_server.url + "/") for url in requests), requests


def test_a_served_demo_steps_with_arrow_right_and_e_downloads_a_bundle_kvviz_open_verifies(
        context, lru_server, tmp_path):
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    downloads = []
    page.on("download", lambda download: downloads.append(download))
    context.on("page", lambda opened: opened.on("download", lambda download: downloads.append(download)))  # textual.js opens a tab
    open_app(page, f"{lru_server.url}/")
    assert step_shown(page)[0] == 0
    page.keyboard.press("ArrowRight")
    wait_for_step(page, 1)
    page.keyboard.press("ArrowRight")
    wait_for_step(page, 2)
    page.keyboard.press("ArrowLeft")
    wait_for_step(page, 1)
    page.keyboard.press("e")
    poll_in_browser(page, lambda: downloads, 30, "a download after e")
    bundle = tmp_path / downloads[0].suggested_filename
    downloads[0].save_as(bundle)
    assert bundle.name.endswith("-step1.json")
    opened = subprocess.run([sys.executable, "-m", "kvviz", "open", "--print", str(bundle)],
                            capture_output=True, text=True, timeout=120)
    assert opened.returncode == 0, opened.stderr
    assert "Step 1" in opened.stdout or "step 1" in opened.stdout, opened.stdout[:500]
    assert list(lru_server.output.parent.glob("kvviz-*")) == []  # nothing written on the server
    assert all(url.startswith(lru_server.url + "/") for url in requests), requests


def test_closing_a_tab_ends_its_app_process(context, lru_server):
    before = lru_server.apps()
    page = context.new_page()
    open_app(page, f"{lru_server.url}/demo/lru")
    app = lru_server.new_app(before)
    assert group_members(app) == [app]  # the app leads a group of its own
    page.close()
    poll(lambda: not group_members(app), GONE_SECONDS, f"app {app}'s group gone after its tab closed")
    assert lru_server.process.poll() is None


def test_a_crashed_browser_ends_its_app_process(lru_server, tmp_path):
    # A browser of its own, killed outright (SIGKILL to its whole group): its socket drops
    # unclosed, as when a laptop's browser crashes. Playwright's browser stays for the others.
    before = lru_server.apps()
    crashing = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         "--no-first-run", "--remote-debugging-port=0", f"{lru_server.url}/demo/lru"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        app = lru_server.new_app(before)
    finally:
        kill_group(crashing.pid)
        crashing.wait(timeout=GONE_SECONDS)
    # Closed by the kernel with the process, the socket ends at once; a vanished peer would
    # take up to two heartbeats (30 s) more.
    poll(lambda: not group_members(app), GONE_SECONDS + 35, f"app {app}'s group gone after its browser died")
    assert lru_server.process.poll() is None


def test_two_tabs_run_two_apps_that_step_independently(context, lru_server):
    before = lru_server.apps()
    first, second = context.new_page(), context.new_page()
    open_app(first, f"{lru_server.url}/")
    first_app = lru_server.new_app(before)
    open_app(second, f"{lru_server.url}/")
    second_app = lru_server.new_app(before + [first_app])
    assert first_app != second_app
    first.bring_to_front()
    first.focus(".xterm-helper-textarea")
    for step in (1, 2, 3):
        first.keyboard.press("ArrowRight")
        wait_for_step(first, step)
    second.bring_to_front()
    second.focus(".xterm-helper-textarea")
    second.keyboard.press("ArrowRight")
    wait_for_step(second, 1)
    assert step_shown(first)[0] == 3 and step_shown(second)[0] == 1


def test_past_the_session_cap_a_page_says_so_and_a_closed_tab_frees_a_place(context, tmp_path):
    with served("lru", cwd=tmp_path, max_sessions=1) as server:
        first = context.new_page()
        open_app(first, f"{server.url}/")
        app = server.new_app([])
        second = context.new_page()
        response = second.goto(f"{server.url}/")
        assert response.status == 503
        assert "at most 1 sessions at once" in second.locator("#full").inner_text()
        first.close()
        poll(lambda: not group_members(app), GONE_SECONDS, "the first tab's app gone")
        open_app(second, f"{server.url}/")  # the place is free again
        assert server.process.poll() is None


def test_ctrl_s_offers_the_script_as_a_download(context, lru_server, tmp_path):
    # (A typed name such as /etc/passwd only names the download: tests/serve/test_served_exports.py.)
    page = context.new_page()
    downloads = []
    page.on("download", lambda download: downloads.append(download))
    context.on("page", lambda opened: opened.on("download", lambda download: downloads.append(download)))
    open_app(page, f"{lru_server.url}/")
    page.evaluate("window.kvvizStream.recent = ''")
    page.keyboard.press("Control+s")
    page.wait_for_function("window.kvvizStream.recent.includes('Save the script as')", timeout=STEP_MS)
    page.keyboard.press("Enter")  # the name offered
    poll_in_browser(page, lambda: downloads, 30, "a download after ctrl+s")
    script = tmp_path / "script.kvs"
    downloads[0].save_as(script)
    assert downloads[0].suggested_filename == "kvviz-session.kvs"
    assert "\ncache trie" in script.read_text() and "acquire s0" in script.read_text()
    checked = subprocess.run([sys.executable, "-m", "kvviz", "check", str(script)], capture_output=True, text=True,
                             timeout=120)
    assert checked.returncode == 0, checked.stderr
    assert list(lru_server.output.parent.glob("*.kvs")) == []
