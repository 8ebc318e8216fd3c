# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch --print`` / ``--json``: the headless outputs of a watched stream.

``--json`` writes JSON lines: with ``--every N`` a ``progress`` object per N steps as they
are received, then one ``summary`` object (:meth:`kvviz.watch.timeline.WatchTimeline.summary`)
at the end. Each line is canonical (sorted keys, no whitespace, ASCII only), so one
recording prints the same bytes every time. :data:`WATCH_JSON_HELP` documents every field
(``kvviz help watch`` prints it; a test holds it to the keys the objects really have).
``--print`` says the same in lines for people (:func:`summary_lines`, :func:`progress_line`).
"""

from __future__ import annotations

import json

from kvviz.watch.wire import LINT_KINDS
from kvviz.printable import printable
from kvviz.watch.events import UNKNOWABLE
from kvviz.core.words import count
from kvviz.watch.timeline import NO_MEDIUM, NOTES_LISTED, SUMMARY_SCHEMA
from kvviz.watch.explain import EXPLAIN_SCHEMA
from kvviz.core.limits import MAX_WATCH_FOREST_BLOCKS

_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def json_line(record: dict) -> str:
    """One canonical JSON line (the same settings as ``kvviz run --json``)."""
    return _encode(record)


def _counts(counts: dict) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in counts.items()) or "none"


def summary_lines(summary: dict) -> list[str]:
    """The summary for people: one fact a line, the same figures as the JSON."""
    s = summary
    seqs = "" if s["first_seq"] is None else f", seq {s['first_seq']}..{s['last_seq']}"
    lines = [
        f"watched {s['source'] or 'a stream'}: {s['messages']:,} messages ({s['batches']:,} decoded, "
        f"{s['undecodable']:,} undecodable){seqs}",
        f"events: {s['events']:,} ({_counts(s['events_by_type'])})",
        f"blocks: {s['blocks_stored']:,} stored ({s['duplicates']:,} already cached), {s['blocks_removed']:,} "
        f"removed ({s['removed_unknown']:,} never seen stored)",
        f"cached at the end: {s['cached_blocks']:,} blocks (peak {s['peak_blocks']:,}; "
        f"{count(s['orphans'], 'orphan')}, {s['orphans_stored']:,} stored as orphans)",
        f"per medium: {_counts(s['per_medium'])}",
        f"gaps: {s['gaps']:,} ({s['missing_messages']:,} messages never received), restarts: {s['restarts']:,}, "
        f"replayed: {s['replayed']:,}",
        f"unknown fields: {_counts(s['unknown_fields'])}",
        f"unknown event types: {_counts(s['unknown_types'])}",
        f"lints (odd but decoded): {_counts(s['lints'])}",
    ]
    if s.get("replayed_too_late"):
        lines.append(f"replayed too late: {s['replayed_too_late']:,} messages came after their place was folded "
                     "away (not shown; their gap stays counted)")
    if s.get("blocks_not_kept"):
        lines.append(f"forest full from step {s['forest_full_step']:,}: {s['blocks_not_kept']:,} new blocks not "
                     f"added (its cap is MAX_WATCH_FOREST_BLOCKS); the view is incomplete from there")
    for kind, first in s["first_lints"].items():
        lines.append(f"  first {kind} lint at step {first['step']:,} (seq {first['seq']}): {first['lint']}")
    for gap in s["gap_list"][:10]:
        lines.append(f"  gap at step {gap['step']:,} (rank {gap['rank']}): seqs {gap['first']}-{gap['last']} missing")
    for restart in s["restart_list"][:10]:
        lines.append(f"  restart at step {restart['step']:,} (rank {restart['rank']}): seq {restart['previous']} "
                     f"then {restart['seq']}; the view was reset")
    for bad in s["undecodable_list"][:10]:
        lines.append(f"  undecodable at step {bad['step']:,} (seq {bad['seq']}): {bad['error']}")
    for hot in s.get("hot_prefixes", ()):
        last = hot["last_tokens"]
        ending = f"[{last[0]} … {last[-1]}]" if len(last) > 2 else str(last)
        lines.append(f"  hot prefix: {count(hot['hits'], 'hit')}, {count(hot['blocks'], 'block')}, "
                     f"tokens 0..{hot['tokens'] - 1}, ending {ending}")
    lines.append(f"digest of the final forest: {s['digest']}")
    lines.append(f"(not shown: {UNKNOWABLE})")
    return [printable(line) for line in lines]  # a medium, a field or an error quotes the stream


def progress_line(progress: dict) -> str:
    """The ``--print --every N`` line of a ``progress`` record."""
    p = progress
    notes = f", {count(p['notes'], 'note')}" if p["notes"] else ""
    return (f"step {p['step']:,} (seq {p['seq']}): {p['cached_blocks']:,} blocks cached (peak {p['peak_blocks']:,}), "
            f"+{p['stored']:,} stored -{p['removed']:,} removed since the last line{notes}")


_LINT_ROWS = "\n".join(f"                      {kind:<19} {meaning}" for kind, (_start, meaning) in LINT_KINDS.items())

WATCH_JSON_HELP = f"""\
kvviz watch ... --json: a watched KV-event stream as JSON lines ({SUMMARY_SCHEMA})

One JSON object per line, keys sorted, no whitespace, ASCII only: the same recording prints
the same bytes. With --every N, one `progress` object per N steps (step = message received),
written as they arrive; then one `summary` object when the watch ends (the recording's end,
--count N messages, --max-seconds S, or Ctrl-C). --print says the same in lines for people.
Undecodable messages, gaps and restarts are counted, never fatal: exit 0, 2 for bad input.
The stream itself says nothing of refs, eviction order or owners ({UNKNOWABLE}).

`progress` (with --every N)
  type              "progress"
  step              the step: the number of messages received so far
  seq               that message's seq
  cached_blocks     blocks cached after it (one per (hash, medium); copies counted once)
  peak_blocks       the most blocks cached after any step so far
  stored            blocks stored since the previous progress line (copies included)
  removed           blocks removed since the previous progress line (unknown ones included)
  notes             notes (gaps, restarts, undecodable, replayed) since the previous line

`summary` (the last line)
  type              "summary"
  schema            "{SUMMARY_SCHEMA}"
  source            the endpoint or recording file watched
  messages          messages received (= steps)
  batches           messages decoded (messages - undecodable)
  events            events in the decoded batches
  events_by_type    {{event type: count}}: BlockStored, BlockRemoved, AllBlocksCleared and any
                    unknown type, by the name the publisher sent
  blocks_stored     block hashes in BlockStored events
  blocks_removed    block hashes in BlockRemoved events
  removed_unknown   removals of a block not cached at the time (never seen, or removed before)
  duplicates        stores of a block already cached on that medium (another copy)
  unknown_fields    {{"EventType.field": count}}: fields this reader does not use, once per
                    event carrying them (group_idx, extra_keys, kv_cache_spec_kind, ...)
  unknown_types     {{event type: count}}: event types this reader does not know (skipped)
  lints             {{kind: count}}: odd things decoded anyway, one per occurrence, by kind:
{_LINT_ROWS}
  first_lints       {{kind: {{"step", "seq", "lint"}}}}: where each kind was first seen, and its
                    sentence (the UI's narration shows every lint of a step)
  cached_blocks     blocks cached after the last step: (hash, medium) pairs with copies left
  peak_blocks       the most blocks cached after any step
  orphans           cached blocks whose parent block is not cached (attached late, or the
                    parent was removed first)
  orphans_stored    blocks that were orphans when they were stored
  gaps              gaps in seq (per rank) that no replay filled
  missing_messages  messages those gaps lost
  gap_list          the gaps, each {{"step", "rank", "first", "last"}} (first..last missing),
                    at most {NOTES_LISTED:,} listed
  restarts          times a seq went backwards (a publisher restart): the view was reset
  restart_list      each {{"step", "rank", "previous", "seq"}}, at most {NOTES_LISTED:,} listed
  undecodable       messages whose payload could not be decoded (the view is unchanged)
  undecodable_list  each {{"step", "seq", "error"}}, at most {NOTES_LISTED:,} listed
  replayed          messages that came from the replay endpoint (live, or marked so in a recording)
  replayed_too_late replayed messages that came after their place in the timeline was folded
                    away to bound a live watch's memory: not shown, their gap stays counted
  blocks_not_kept   new blocks not added to the forest because it held its cap of
                    {MAX_WATCH_FOREST_BLOCKS:,} blocks (MAX_WATCH_FOREST_BLOCKS; 0: never full)
  forest_full_step  the step at which that first happened (null: never); the view is
                    incomplete from there on
  per_medium        {{medium: cached blocks}} after the last step; "{NO_MEDIUM}" for blocks
                    sent without a medium
  first_seq         the first message's seq (null when none)
  last_seq          the last message's seq (null when none)
  digest            the final forest's set digest: kvcore's AdHash of each block's canonical
                    JSON row (ForestState.digest(), kept up to date batch by batch; watch
                    bundles record it after every step and `kvviz open` verifies them)
  hot_prefixes      the prefixes most built upon, hottest first (at most 5): each stored
                    chain whose parent was cached hit its parent's whole path, one hit per
                    block on it; a hot prefix ends where no child has as many hits. Each
                    {{"hits", "blocks", "tokens", "last_tokens"}} (tokens from the root; the
                    last block's token ids). A batch that stored nothing is not counted.
  hot_prefixes_from_step  the first batch the hot prefixes count (1; later when a live watch
                    folded its early steps to bound its memory, whose batches are gone)

`explain` (--explain REQUEST [--at STEP], the only line: {EXPLAIN_SCHEMA})
  The prompt's full blocks are matched by content (parent chain + token ids, as an engine's
  block hash would; no engine hash is recomputed) against the forest after STEP; the first
  block that does not match is classified. --print says the same in lines.
  type              "explain"
  schema            "{EXPLAIN_SCHEMA}"
  cause             hit: every full block matched · below-block: no full block in the prompt ·
                    first-seen: no block with this content was ever stored under this prefix ·
                    evicted: it was stored, then removed (or cleared) before STEP ·
                    diverged: a cached block under the same prefix differs inside this block ·
                    extra-keys: the same tokens are cached under another LoRA ·
                    other-medium: the block is cached only on another tier (CPU, disk) ·
                    unknown: the evidence is incomplete (see `incomplete`, `suggested`)
  proven            true when the stream settles the cause from its first message to STEP;
                    false when it is only suggested (extra-keys: the request's other keys are
                    not known; unknown)
  suggested         with unknown: the cause the stream alone suggests (else null)
  incomplete        why the evidence is incomplete: a gap or restart at a step, an
                    undecodable message, a late attach (first seq not 0, orphans, removals
                    of blocks never seen), blocks without token ids ([] when complete)
  step, seq         the step asked about and its message's seq
  block_size        tokens per block, from the stream's stores (null: none stored yet)
  prompt_tokens     the prompt's tokens
  full_blocks       its full blocks (prompt_tokens // block_size)
  matched_blocks    full blocks cached, from the first on
  hit_tokens        matched_blocks * block_size (the partial tail is never cached)
  block             the first unmatched block's index (0-based; null on a hit or below-block)
  diverged_at_token the prompt position of the first token that differs (diverged; else null)
  context           diverged: {{"prompt", "cached"}} tokens around it (and "prompt_text",
                    "cached_text" with --tokenizer); else null
  stored_at_step, stored_at_seq    evicted: the last store of the block before its removal
  removed_at_step, removed_at_seq  evicted: the removal (or clear) that took its last copy
  medium            other-medium: the tier holding it (as sent); else null
  keys              extra-keys: {{"request": LoRA, "cached": [LoRA, ...]}}; else null
  text              the first unmatched block's text (with --tokenizer; else null)
  evidence          the verdict's evidence in one sentence
"""
"""What ``kvviz help watch`` prints: every field of the records ``kvviz watch --json`` writes."""

__all__ = ["WATCH_JSON_HELP", "json_line", "progress_line", "summary_lines"]
