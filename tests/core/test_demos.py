# SPDX-License-Identifier: Apache-2.0
"""Every shipped demo is also a test: it parses, is narrated, and its expects and the
invariants hold at every step (directly through Session and through `kvviz check`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.core.demos import demo_dir
from kvviz.core.scenario import parse_scenario_file
from kvviz.core.session import Session

DEMOS = sorted(demo_dir().glob("*.kvs"))
IDS = [p.stem for p in DEMOS]

REQUIRED = {
    "lru", "prefix-sharing", "extend", "progressive-publish", "refcount", "eviction-cascade",
    "dedup", "heap-ties", "base-vs-trie", "multi-turn-chat",
}
REQUIRED_BUGS = ("b2", "b3", "b5", "b6", "b8", "b12")

_EXPECT_WITH_NUMBER = re.compile(r"^(\s*(?:\[[^\]]*\]\s*)?expect\s+\S+(?:\s+\S+)*?\s+)(\d+)(\s*(?:#.*)?)$", re.IGNORECASE)


def _run(path: Path) -> Session:
    return Session.from_scenario(parse_scenario_file(path))


def test_there_are_demos_with_the_required_names():
    names = set(IDS)
    assert len(names) >= 10
    assert REQUIRED <= names, f"missing demos: {sorted(REQUIRED - names)}"
    for bug in REQUIRED_BUGS:
        assert any(name.startswith(f"bug-{bug}-") for name in names), f"no bug-museum demo for {bug.upper()}"


@pytest.mark.parametrize("path", DEMOS, ids=IDS)
def test_demo_has_title_and_description(path):
    scenario = parse_scenario_file(path)
    assert scenario.title.strip(), "no title:"
    assert "\n" not in scenario.title
    assert len(scenario.description.split()) >= 15, "the description should be a real paragraph"
    assert scenario.steps, "a demo needs ops"


@pytest.mark.parametrize("path", DEMOS, ids=IDS)
def test_every_step_is_narrated(path):
    scenario = parse_scenario_file(path)
    # Every kind the script is written for: its header's, and any a tagged line names.
    kinds = {scenario.config.kind} | {k for step in scenario.steps for p in step.paragraphs for k in p.kinds or ()}
    for kind in sorted(kinds):
        silent = [step.op.line for step in scenario.steps if not step.narration_for(kind).strip()]
        assert not silent, f"steps without {kind} narration at lines {silent}"


@pytest.mark.parametrize("path", DEMOS, ids=IDS)
def test_demo_has_expects_and_ends_with_no_violations(path):
    scenario = parse_scenario_file(path)
    expects = [x for step in scenario.steps for x in step.expects]
    assert len(expects) >= 3
    last = scenario.steps[-1].expects
    assert any(x.kind == "violations" and x.values == (0,) for x in last), "end with `expect violations 0`"


@pytest.mark.parametrize("path", DEMOS, ids=IDS)
def test_demo_expects_hold_and_invariants_hold(path):
    scenario = parse_scenario_file(path)
    session = _run(path)
    assert len(session) == len(scenario.steps) + 1
    for i, step in enumerate(scenario.steps, 1):
        frame = session.frame(i)
        assert len(frame.expects) == len(step.expects_for(session.config.kind))
        failures = [f"line {r.expect.line}: {r.expect.text}: {r.message}" for r in frame.expect_failures]
        assert not failures, f"step {i} `{step.op.text}`: {failures}"
        assert not frame.violations, f"step {i} `{step.op.text}`: {list(map(str, frame.violations))}"
        if frame.failed:  # a failed op is announced by the script and changes nothing
            assert any(x.kind == "fail" for x in step.expects), f"step {i} failed unexpectedly: {frame.error}"
            assert frame.snapshot == session.frame(i - 1).snapshot


def test_base_vs_trie_is_narrated_and_checked_on_both_kinds():
    scenario = parse_scenario_file(demo_dir() / "base-vs-trie.kvs")
    for kind in ("trie", "base"):
        session = Session.from_scenario(scenario, kind=kind)
        checked = [r for i in range(1, len(session)) for r in session.frame(i).expects]
        assert len(checked) == sum(len(step.expects_for(kind)) for step in scenario.steps) > 10
        assert all(r.ok for r in checked), [(r.expect.text, r.message) for r in checked if not r.ok]
        assert session.unchecked_expects == 0
    base = Session.from_scenario(scenario, kind="base")
    assert "nowhere to share pages" in base.frame(2).narration and "Trie" not in base.frame(2).story
    assert base.frame(3).failed is False and tuple(base.frame(3).snapshot.allocation_named("r2").pages) == (3, 4, 5)


def test_a_trie_script_on_the_base_cache_shows_none_of_its_trie_narration_and_says_so():
    scenario = parse_scenario_file(demo_dir() / "lru.kvs")
    session = Session.from_scenario(scenario, kind="base")
    assert session.unchecked_expects == sum(len(step.expects) for step in scenario.steps) > 0
    assert all(session.frame(i).story == "" for i in range(1, len(session)))
    assert all(session.frame(i).expects == () for i in range(1, len(session)))
    assert f"its {session.unchecked_expects} untagged expect lines are not checked" in session.frame(0).story
    assert Session.from_scenario(scenario).unchecked_expects == 0


def test_kvviz_check_passes_on_every_demo():
    result = CliRunner().invoke(cli, ["check", *map(str, DEMOS)])
    assert result.exit_code == 0, result.output
    assert result.output.count("ok ") == len(DEMOS)


def _break_first_numeric_expect(text: str) -> tuple[str, int]:
    """``text`` with the first numeric expect's last number changed, and that line's number."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        match = _EXPECT_WITH_NUMBER.match(line)
        if match:
            lines[index] = f"{match[1]}{int(match[2]) + 1}{match[3]}"
            return "\n".join(lines), index + 1
    raise AssertionError("no expect with a number to break")


@pytest.mark.parametrize("path", DEMOS, ids=IDS)
def test_kvviz_check_fails_on_a_broken_copy_and_names_the_line(path, tmp_path):
    broken_text, line = _break_first_numeric_expect(path.read_text(encoding="utf-8"))
    broken = tmp_path / path.name
    broken.write_text(broken_text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", str(broken)])
    assert result.exit_code == 1, result.output
    assert f"{broken}:{line}:" in result.output
    assert "expected" in result.output and "got" in result.output


def test_base_vs_trie_runs_on_the_base_cache_as_narrated():
    """Declared trie; on --base the expects differ, but the invariants hold and the third
    request fails for lack of pages, as the narration says."""
    path = demo_dir() / "base-vs-trie.kvs"
    scenario = parse_scenario_file(path)
    assert scenario.config.kind == "trie"
    session = Session.from_scenario(scenario, kind="base")
    failed = []
    for i in range(1, len(session)):
        frame = session.frame(i)
        assert not frame.violations
        if frame.failed:
            failed.append((frame.op.kind, frame.op.name, frame.error.kind))
    assert failed == [("acquire", "r3", "CacheAllocationFailure"), ("release", "r3", "InvalidOperation")]
    assert session.last.snapshot.stats.hit_tokens == 0
