# SPDX-License-Identifier: Apache-2.0
"""`kvviz run --backend shortfin --substeps`: shortfin's sub-steps are its calls, headless too,
and each call's state is what its reader observed then (the last is the step's snapshot)."""

from __future__ import annotations

import json

from shortfin_guard import require_shortfin

require_shortfin()

from click.testing import CliRunner  # noqa: E402

from kvcore import Snapshot  # noqa: E402
from kvviz.backends.registry import make_backend_factory  # noqa: E402
from kvviz.cli import cli  # noqa: E402
from kvviz.core.demos import load_demo  # noqa: E402
from kvviz.core.session import Session  # noqa: E402
from kvviz.report.timeline_json import read_states  # noqa: E402

SHORTFIN_CALLS = {"lookup", "allocate", "publish_pages_for_tokens", "release_pages", "free_allocated_pages", "record"}


def kvviz(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz", catch_exceptions=False)


def shortfin_session(name: str) -> Session:
    return Session.from_scenario(load_demo(name), backend_factory=make_backend_factory("shortfin"))


def test_shortfin_json_substeps_are_calls_ending_at_each_steps_snapshot():
    result = kvviz("run", "lru", "--backend", "shortfin", "--json", "--substeps", "--states")
    # shortfin breaks some of the demo's expects (its trie differs from ours): the same
    # verdict as --print, on stderr, after well-formed JSON.
    printed = kvviz("run", "lru", "--backend", "shortfin", "--print")
    assert (result.exit_code, result.stderr) == (printed.exit_code, printed.stderr)
    header, *objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert header["backend"] == "shortfin"
    session = shortfin_session("lru")
    steps = {o["step"]: o for o in objects if o["type"] == "step"}
    states = {o["step"]: snap for o, snap in read_states(objects)}  # the first whole, then changes
    assert sorted(steps) == list(range(len(session)))
    for i in range(1, len(session)):
        subs = [o for o in objects if o["type"] == "substep" and o["step"] == i]
        assert steps[i]["substeps"]["source"] == "calls" and "between its calls" in steps[i]["substeps"]["note"]
        assert [o["sentence"] for o in subs] == [s.sentence for s in session.substeps(i)]
        for o in subs:
            assert o["kind"] == "call"
            assert o["event"]["type"] == "Call" and o["event"]["method"] in SHORTFIN_CALLS
        assert Snapshot.from_dict(subs[-1]["state"]) == states[i] == session.frame(i).snapshot
    first_acquire = [o["event"]["method"] for o in objects if o["type"] == "substep" and o["step"] == 1]
    assert first_acquire[0] == "lookup"  # shortfin's acquire starts by looking the tokens up


def test_shortfin_print_substeps_lists_the_calls_and_says_they_are_calls():
    result = kvviz("run", "lru", "--backend", "shortfin", "--print", "--substeps", "--step", "1")
    session = shortfin_session("lru")
    subs = session.substeps(1)
    assert f"({subs.note}):" in result.stdout
    call_lines = [line.split() for line in result.stdout.splitlines() if line.startswith("    ")
                  and len(line.split()) > 2 and line.split()[1] == "call"]
    assert [int(words[0]) for words in call_lines] == list(range(1, len(subs) + 1))  # people count from 1
    for words, sub in zip(call_lines, subs):
        assert " ".join(words[3:]) == sub.sentence
