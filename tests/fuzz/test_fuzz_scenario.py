# SPDX-License-Identifier: Apache-2.0
"""Fuzzing the scenario language end to end with mutants of the shipped demos.

The promise: whatever a ``.kvs`` file holds, parsing gives a scenario (whose canonical text
parses back to it and stays about as small as the source) or one :class:`ScenarioError`
listing located problems in a few short lines; and ``kvviz check``, ``kvviz export -o
x.json`` and ``kvviz open x.json --print`` of what export wrote each exit 0 or 1 with output,
or 2 with exactly one error (one line; a scenario's other located problems may follow it) and
nothing written, never a traceback, within a memory cap and a time alarm per example.

The mutants start from every demo and duplicate, repeat, delete, swap and replace lines,
put huge ranges, numbers, word lists and stray tags into op and expect lines, flood the script
with lines at the per-line limit, and flip or insert bytes. ``KVVIZ_FUZZ_SCALE`` (default 1) multiplies the examples:
``KVVIZ_FUZZ_SCALE=100 pytest tests/fuzz/test_fuzz_scenario.py`` is the soak run.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from pathlib import Path
from unittest import mock

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.cli import cli
from kvviz.core.demos import demo_dir
from kvviz.core.limits import MAX_SCENARIO_ERRORS
from kvviz.core.scenario import ScenarioError, format_scenario, parse_scenario, parse_scenario_bytes
from kvviz.core.scenario import parse as parse_module

from .bounds import alarm, fuzz_scale, memory_cap

SCALE = fuzz_scale()
MEMORY_HEADROOM = 1536 * 1024 * 1024
"""Address space one example may add: a scenario at the token budget (ten million values)
takes about 400 MB to run; reproduction took 4.1 GB."""
SECONDS_PER_EXAMPLE = 20  # generous: the machine is shared; the bugs this catches took 47 s and more

SOURCES = tuple(path.read_bytes() for path in sorted(demo_dir().glob("*.kvs")))

HUGE_ITEMS = (
    "0..999999", "0..9999999", "1..1000000", "7..3", "0..99999999999999999999", "0.." + "9" * 5000, "9" * 5000,
    '"' + "word " * 2000 + '"', "extra=999999", "extra=" + "9" * 30, "+", '"', ",", "#", "=",
)
BIG_LINES = (
    "expect pages r1 0..999999", "expect evicted 0..999999", "[trie] expect pages a 0..999999",
    "acquire big 0..999999", "extend r1 + 0..999999", "publish r1 0..999999",
)
"""Lines at the per-line limit: flooding a script with them is reproduction."""
JUNK_LINES = (
    "acquire", "acquire r1", "release ghost", "expect", "expect pages r1 0..999999", "expect evicted 0..2000000",
    "expect live " + "n " * 500, "[trie] expect ok", "[base] expect fail alloc", "[tire] expect ok", "[trie]",
    "[trie] acquire x 1", ">", "[base] > scoped words", "> dangling", "cache base pages=3", "title: again",
    "description: late", "expect fail", "expect ok", "\t", "\ufeff", "\x00", "é" * 30, "expect ref 0 2",
)


@st.composite
def mutants(draw) -> bytes:
    """A demo, changed in one to four places."""
    lines = draw(st.sampled_from(SOURCES)).split(b"\n")
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, max(len(lines) - 1, 0)))
        action = draw(st.sampled_from(["duplicate", "repeat", "delete", "swap", "junk", "huge", "flood", "bytes"]))
        if not lines:
            lines = [b""]
        if action == "duplicate":
            lines.insert(where, lines[where])
        elif action == "repeat":
            lines[where:where + 1] = [lines[where]] * draw(st.integers(2, 200))
        elif action == "delete":
            del lines[where]
        elif action == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[where], lines[other] = lines[other], lines[where]
        elif action == "junk":
            junk = draw(st.sampled_from(JUNK_LINES) | st.text(max_size=12))
            lines.insert(where, junk.encode("utf-8", "surrogatepass"))
        elif action == "flood":
            lines[where:where] = [draw(st.sampled_from(BIG_LINES)).encode()] * draw(st.integers(1, 80))
        elif action == "huge":
            lines[where] = _with_huge_item(lines[where], draw(st.sampled_from(HUGE_ITEMS)), draw(st.booleans()))
        else:
            line = bytearray(lines[where])
            at = draw(st.integers(0, len(line)))
            if at < len(line) and draw(st.booleans()):
                line[at] = draw(st.integers(0, 255))
            else:
                line[at:at] = draw(st.binary(min_size=1, max_size=6))
            lines[where] = bytes(line)
    return b"\n".join(lines)


def _with_huge_item(line: bytes, item: str, replace_last: bool) -> bytes:
    """``line`` with ``item`` appended, or in place of its last word. The cache line is left
    alone: a million-page cache is the scale test's business, not the language's."""
    if line.lstrip().lower().startswith(b"cache"):
        return line
    words = line.split(b" ")
    if replace_last and len(words) > 2:
        words[-1] = item.encode()
    else:
        words.append(item.encode())
    return b" ".join(words)


def fuzz(examples: int) -> settings:
    """Settings for a fuzzer of ``examples`` examples (times the scale); no deadline, since
    the alarm bounds each example and timings on a shared machine are noise."""
    return settings(max_examples=examples * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@fuzz(200)
@given(mutants())
def test_a_mutated_demo_parses_and_round_trips_or_reports_a_few_located_errors(data):
    with memory_cap(MEMORY_HEADROOM), alarm(SECONDS_PER_EXAMPLE):
        try:
            scenario = parse_scenario_bytes(data, "mutant.kvs")
        except ScenarioError as error:
            lines = error.report().split("\n")
            assert str(error) == lines[0]
            assert 1 <= len(lines) <= MAX_SCENARIO_ERRORS + 1
            assert all(line.startswith("mutant.kvs:") for line in lines[: len(error.errors)])
            assert all(e.line >= 1 and e.column >= 1 for e in error.errors)
            assert all(len(line) < 600 for line in lines), "a message quotes too much"
            return
        text = format_scenario(scenario)
        assert len(text) <= 2 * len(data) + 1_000, "the formatter wrote ranges out"
        assert parse_scenario(text) == dataclasses.replace(scenario, path=None, source=text)


@fuzz(100)
@given(mutants())
def test_a_dry_read_of_a_mutated_demo_finds_what_a_full_read_finds(data):
    """Scripts whose ranges might exceed the budget are refused by a read that builds no
    value: it must accept and refuse exactly what a full read does. (Under a smaller budget,
    so that more mutants cross it and a full read of one costs little.)"""
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")
    outcomes = []
    with memory_cap(MEMORY_HEADROOM), alarm(SECONDS_PER_EXAMPLE), \
            mock.patch.object(parse_module, "MAX_TOKENS_PER_SCENARIO", 2_000_000):
        for build in (False, True):
            try:
                parse_module._read_lines("m.kvs", parse_module._source_lines(text), text, build=build)
                outcomes.append("parsed")
            except ScenarioError as error:
                outcomes.append(error.report())
    assert outcomes[0] == outcomes[1]


def kvviz(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz", catch_exceptions=True)


MORE_LOCATED_ERRORS = re.compile(r"\S+:[0-9]+:[0-9]+: .+|… and [0-9,]+ more errors?")


def assert_kept_the_promise(result, command: str) -> None:
    """Exit 0 or 1 with output, or 2 with exactly one error; never a traceback.

    The error is one ``kvviz: error:`` line. A scenario with several problems may list the
    others after it, each located, at most
    MAX_SCENARIO_ERRORS in all and then a count."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{command}: {type(result.exception).__name__}: {result.exception}")
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 1, 2), (command, result.exit_code)
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert lines and lines[0].startswith("kvviz: error: "), (command, result.stderr[:2000])
        assert all(MORE_LOCATED_ERRORS.fullmatch(line) for line in lines[1:]), (command, result.stderr[:2000])
        assert len(lines) <= MAX_SCENARIO_ERRORS + 1
        assert all(len(line) < 1_000 for line in lines), "an error line quotes too much"
    else:
        assert result.stdout.strip(), f"{command} exited {result.exit_code} without output"


@fuzz(60)
@given(mutants())
def test_check_export_and_open_of_a_mutated_demo_keep_their_promises(data):
    with tempfile.TemporaryDirectory() as inputs, tempfile.TemporaryDirectory() as outputs:
        source = Path(inputs, "mutant.kvs")
        source.write_bytes(data)
        bundle = os.path.join(outputs, "x.json")
        with memory_cap(MEMORY_HEADROOM), alarm(SECONDS_PER_EXAMPLE):
            checked = kvviz("check", str(source))
            assert_kept_the_promise(checked, "check")
            exported = kvviz("export", str(source), "-o", bundle)
            assert_kept_the_promise(exported, "export")
            if exported.exit_code == 2:
                assert os.listdir(outputs) == [], "export failed but wrote something"
                assert checked.exit_code == 2 or "bundle" in exported.stderr, exported.stderr
                return
            assert os.listdir(outputs) == ["x.json"], "export wrote something besides its output"
            assert checked.exit_code != 2, "check refused what export accepted"
            opened = kvviz("open", bundle, "--print")
            assert_kept_the_promise(opened, "open")
            assert opened.exit_code != 2, f"open refuses what export wrote: {opened.stderr}"
        assert source.read_bytes() == data, "the input was changed"
