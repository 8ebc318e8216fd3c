# SPDX-License-Identifier: Apache-2.0
"""The topics of ``kvviz help``: one table, each topic a summary line and its page.

``kvviz help`` alone lists the topics; ``kvviz help TOPIC`` prints one page. Pages that
document a table elsewhere are built from it (the keys from the app's help screen, the
question kinds from the quiz, the expect kinds from the expect table, the JSON fields from
``timeline_json``), so a new key or kind shows up here without a second list to forget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click

from kvviz.commands import BadInput


@dataclass(frozen=True)
class Topic:
    """A help topic: what it covers (one line, for the list) and its page (built on demand:
    the keys page imports the UI's table, which a listing must not pay for)."""

    summary: str
    page: Callable[[], str]


def _scenarios() -> str:
    from kvviz.core.scenario import SCENARIO_HELP

    return SCENARIO_HELP + "\n"


def _json() -> str:
    from kvviz.report.timeline_json import JSON_HELP

    return JSON_HELP


def _watch() -> str:
    from kvviz.watch.subscriber import memory_help
    from kvviz.watch.timeline import timeline_memory_help
    from kvviz.watch.json_output import WATCH_JSON_HELP

    return WATCH_JSON_HELP + "\n\n" + memory_help() + "\n" + timeline_memory_help()


def _samples() -> str:
    from kvviz.samples import samples_help

    return samples_help()


def _keys() -> str:
    from kvviz.explore.quiz_mode import QUIZ_KEYS
    from kvviz.ui.screens.help_screen import KEYS

    width = max(len(key) for key, _ in KEYS)
    lines = ["Keys of the kvviz UI (kvviz demo, run, open, quiz; ? shows them in the app)", ""]
    lines += [f"  {key:<{width}}  {what}" for key, what in KEYS]
    lines += ["", f"In quiz mode the question panel takes: {QUIZ_KEYS}."]
    return "\n".join(lines) + "\n"


def _quiz() -> str:
    from kvviz.teach.quiz import KINDS

    width = max(len(kind.title) for kind in KINDS.values())
    lines = [
        "kvviz quiz: predict what the cache does, then see if you were right",
        "",
        "  kvviz quiz DEMO|FILE --plain     questions on a demo or a .kvs file, in plain text",
        "  kvviz quiz --random --seed N --level easy|medium|hard --plain",
        "                                   on a generated scenario (--save FILE keeps it)",
        "  kvviz quiz DEMO                  in the UI, quiz mode (p switches it in any session)",
        "",
        "Each interesting step asks one question before it is shown; the same seed asks the",
        "same questions. Answer with a choice letter or the answer itself (a number, pages",
        "such as `3 5`), `?` for a hint (again: a closer one), a blank line to skip; end of",
        "input ends the quiz with the score. --json ends with one JSON object of every",
        "question and answer (with the mistake tag of each choice given, the hints, the why).",
        "Trie, base and hash caches are quizzed, each with its own question kinds.",
        "",
        "Question kinds:",
    ]
    from kvviz.core.designs import KVCORE_DESIGNS, design

    for name in KVCORE_DESIGNS:  # each design brings its own kinds
        lines.append(f" the {name} cache:")
        lines += [f"  {kind.title:<{width}}  answer: a {kind.form} of {kind.noun}s" if kind.form != "number"
                  else f"  {kind.title:<{width}}  answer: a number ({kind.noun}s)"
                  for kind in (KINDS[k] for k in design(name).questions)]
    return "\n".join(lines) + "\n"


_COMPARE = """\
kvviz compare: one scenario on two cache configurations, side by side

  kvviz compare FILE --right KIND[:POLICY] [--left KIND[:POLICY]] [--print | --json | --step N]

KIND is trie, base or hash; POLICY one of the trie's eviction policies (lru, fifo, lfu,
mru, filo, slru, priority); a trie without a policy takes the script's. --left defaults
to the script's own cache line. --left-backend / --right-backend shortfin or sglang run a
side on shortfin's or SGLang 0.5.23's trie (lru only), vllm on vLLM 0.33.0's prefix cache
(hash). The engines need a venv of their own with a CPU torch (~2 min, ~3.5 GB), from a
checkout: bash scripts/install-engines.sh VENV, then VENV/bin/kvviz. A misspelt kind or policy
is refused with the names it could mean (trie:lruu: unknown policy 'lruu'; did you mean 'lru'?).

Both sides step together. They diverge on what a user of the cache can observe: an op's
success or failure, free pages, cached blocks, each allocation's block table; the first
step where the sides differ (the first divergence) is marked. Each side counts hit tokens, pages computed and
reused, evictions and failed ops. The script's narration and expects apply on the side
that runs its own cache line; the output says which side checked them.

  --print   the first divergence, then a table of every step with both sides' counters
  --json    one JSON object (schema kvviz.compare/2): both sides per step, with digests
  (none)    the UI, two columns, at the first divergence (or --step N)

A side run by another backend than kvcore names its known issues: those seen up to the
divergence (the likely explanation), or that none explains it (a new finding).
Exit 0 when the sides agree at every step, exit 1 at a divergence, 2 for bad input.
kvviz diff FILE is the special case kvcore's trie against shortfin's; kvviz diff FILE
--backend sglang puts SGLang's RadixCache there, --backend vllm kvcore's hash design against
vLLM's KVCacheManager: the report and JSON of kvviz compare --right KIND --right-backend B.
"""


def _compare() -> str:
    from kvviz.compare.engine import COMPARE_JSON_HELP

    return _COMPARE + "\n" + COMPARE_JSON_HELP

_TRACE = """\
kvviz trace: replay a Mooncake request trace (JSONL) through the KV cache

  kvviz trace FILE|SAMPLE [--capacity-tokens 3M] [--design trie|hash | --base] [--policy P]
  kvviz trace FILE --sweep [--design trie,hash] [--policy lru,lfu]   hit rate vs capacity
  kvviz trace FILE --first N --to-kvs OUT.kvs                       a scenario to step through
  kvviz trace FILE --first N --ui                                   the replay in the UI

FILE is a Mooncake JSONL trace (gzip-compressed or not), or the name of a shipped sample:
conversation or synthetic (kvviz help samples), e.g. kvviz trace conversation --sweep.

Units: each hash id of a request is one block of --page-tokens tokens (512 in the
Mooncake release) and one page of the cache; requests share pages as far as their hash
ids agree from the start. A converted scenario has tokens_per_page=1: one token is one
block, and its title says so.

Designs: trie (SGLang's radix tree, with --policy), hash (vLLM's hash blocks and free
queue, lru only; --design hash --to-kvs writes a `cache hash` scenario), --base (no
sharing). --with-output also holds pages for output tokens; --concurrency overlaps
requests by arrival time (--prefill-ms-per-token, --decode-ms-per-token).

Prints requests, token hit rate, the trace's prefix-reuse ratio, pages evicted, peak pages
held and requests that failed to fit; --json prints the same as JSON. A bad line stops the
read (exit 2) unless --on-error skip. A converted scenario carries the replay's expect
lines, so kvviz check OUT.kvs verifies the cache still does what the replay measured.
Limits (kvviz/core/limits.py, docs/reference/limits.md): MAX_TRACE_LINE_BYTES, MAX_TRACE_BLOCKS,
MAX_CAPACITY_TOKENS, MAX_SWEEP_BLOCKS.
"""

TOPICS: dict[str, Topic] = {
    "scenarios": Topic("the scenario language (.kvs files, the command bar, expect lines)", _scenarios),
    "json": Topic("the fields of kvviz run --json (kvviz.timeline/3)", _json),
    "keys": Topic("the keys of the UI", _keys),
    "quiz": Topic("kvviz quiz: how questions are asked and answered, the question kinds", _quiz),
    "compare": Topic("kvviz compare and diff: two caches side by side, what counts as a divergence, the JSON",
                     _compare),
    "trace": Topic("kvviz trace: replaying Mooncake traces, units, designs, --sweep, --to-kvs", lambda: _TRACE),
    "watch": Topic("the fields of kvviz watch --json (kvviz.watch-summary/1)", _watch),
    "samples": Topic("the traces and KV-event recordings shipped with kvviz, by name", _samples),
}
"""Every topic of ``kvviz help``, in the order the list shows them."""

ALIASES = {"scenario": "scenarios", "language": "scenarios", "key": "keys", "keyboard": "keys", "sample": "samples", "data": "samples"}
"""Other names a topic answers to."""


def topic_list() -> str:
    """What ``kvviz help`` alone prints: every topic and what it covers."""
    width = max(map(len, TOPICS))
    lines = ["kvviz help TOPIC prints one of these pages (kvviz COMMAND -h: a command's options):", ""]
    lines += [f"  {name:<{width}}  {topic.summary}" for name, topic in TOPICS.items()]
    return "\n".join(lines) + "\n"


@click.command(name="help")
@click.argument("topic", required=False)
def help_(topic: str | None) -> None:
    """Documentation topics (no TOPIC: list them): `kvviz help scenarios` (the language),
    `kvviz help json` (the fields of `kvviz run --json`), keys, quiz, compare, trace, watch,
    samples (the shipped traces and recordings)."""
    if topic is None:
        click.echo(topic_list(), nl=False)
        return
    name = ALIASES.get(topic.lower(), topic.lower())
    if name in TOPICS:
        click.echo(TOPICS[name].page(), nl=False)
        return
    raise BadInput(f"no help topic {topic!r} (expected one of: {', '.join(TOPICS)})")
