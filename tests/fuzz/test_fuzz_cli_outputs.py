# SPDX-License-Identifier: Apache-2.0
"""Fuzz what kvviz writes: the atomic writer replaces only a regular file
or nothing, and ``kvviz run --json`` either refuses before its first line or writes no more
step snapshots x pages than its limit.

Bounds: 60 examples each (x ``KVVIZ_FUZZ_SCALE``); targets in a fresh folder; pools of up to
64 pages and 12 ops under a limit lowered to 256 snapshots x pages, so each example is
milliseconds; every example under HEADROOM bytes and SECONDS.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .bounds import alarm, fuzz_scale, memory_cap

SCALE = fuzz_scale()
FUZZ = settings(max_examples=60 * SCALE, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
HEADROOM = 512 * 2**20
SECONDS = 20

LIMIT = 256  # MAX_STEP_STATE_PAGES while fuzzing: crossed by small pools, so examples stay fast

TARGETS = ["absent", "regular", "fifo", "symlink-to-regular", "dangling-symlink", "symlink-to-fifo", "folder"]


def _make(folder: Path, what: str) -> Path:
    path = folder / "out.md"
    if what == "regular":
        path.write_text("old\n")
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "symlink-to-regular":
        (folder / "real").write_text("precious\n")
        path.symlink_to(folder / "real")
    elif what == "dangling-symlink":
        path.symlink_to(folder / "nowhere")
    elif what == "symlink-to-fifo":
        os.mkfifo(folder / "pipe")
        path.symlink_to(folder / "pipe")
    elif what == "folder":
        path.mkdir()
    return path


@FUZZ
@given(what=st.sampled_from(TARGETS), text=st.text(max_size=200), capped=st.booleans())
def test_the_atomic_writer_replaces_a_regular_file_or_nothing_and_refuses_the_rest(what, text, capped):
    from kvviz.report.atomic import open_atomic

    with tempfile.TemporaryDirectory() as name, memory_cap(HEADROOM), alarm(SECONDS):
        folder = Path(name)
        path = _make(folder, what)
        before = os.lstat(path).st_mode if os.path.lexists(path) else None
        try:
            with open_atomic(path, max_bytes=10_000 if capped else None) as write:
                write(text)
        except OSError:
            assert what not in ("absent", "regular"), what
            assert os.lstat(path).st_mode == before  # the special file is still there, as it was
        else:
            assert what in ("absent", "regular"), f"the writer replaced a {what}"
            assert stat.S_ISREG(os.lstat(path).st_mode) and path.read_bytes() == text.encode("utf-8")
        assert [p for p in os.listdir(folder) if p.endswith(".part")] == []
        if what == "symlink-to-regular":
            assert (folder / "real").read_text() == "precious\n"


@FUZZ
@given(pages=st.integers(1, 64), ops=st.integers(0, 12), step=st.none() | st.integers(0, 12))
def test_run_json_refuses_before_its_first_line_or_stays_within_its_step_limit(pages, ops, step):
    import kvviz.core.limits as limits
    from kvviz.cli import cli

    script = f"cache trie pages={pages} tokens_per_page=1\n" + "".join(
        f"acquire a{i} {i}\nrelease a{i}\n" for i in range((ops + 1) // 2))
    steps = 1 + 2 * ((ops + 1) // 2)
    saved = limits.MAX_STEP_STATE_PAGES
    limits.MAX_STEP_STATE_PAGES = LIMIT
    try:
        with tempfile.TemporaryDirectory() as name, memory_cap(HEADROOM), alarm(SECONDS):
            path = Path(name) / "s.kvs"
            path.write_text(script)
            # --snapshots: every state whole, as --step N writes its one (the changes form has its
            # own bound, tests/report/test_run_json_changes.py).
            args = ["run", str(path), "--json", "--snapshots"] + ([] if step is None else ["--step", str(step)])
            result = CliRunner().invoke(cli, args, catch_exceptions=True)
    finally:
        limits.MAX_STEP_STATE_PAGES = saved
    if step is not None and step >= steps:
        assert result.exit_code == 2 and result.stdout == ""
        return
    printed = 1 if step is not None else steps
    if printed * pages > LIMIT:
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert "MAX_STEP_STATE_PAGES" in result.stderr
    else:
        assert result.exit_code == 0, result.output
        assert len(result.stdout.splitlines()) == printed + 1
