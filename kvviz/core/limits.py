# SPDX-License-Identifier: Apache-2.0
"""Every size kvviz bounds, in one place: big enough for real traces, small enough that no
input can exhaust memory or time. Each limit is checked before the work it bounds starts,
and each is tested at its edge. docs/reference/limits.md lists them (generated from this module).
"""

from __future__ import annotations

# -- scenarios (the .kvs language) --------------------------------------------------------

MAX_SOURCE_BYTES = 5_000_000
"""Bytes of one scenario file (or command-bar line)."""
MAX_PAGES = 1_000_000
"""Pages of one cache (``cache trie pages=N``)."""
MAX_TOKENS_PER_PAGE = 65_536
"""A cache's ``tokens_per_page``."""
MAX_TOKENS_PER_OP = 1_000_000
"""Tokens one op (or one ``expect`` list) may spell out, after ranges and words expand."""
MAX_TOKENS_PER_SCENARIO = 10_000_000
"""Tokens a whole scenario may spell out: a 5 MB file of big ranges must not need 100 GB."""
MAX_EXTRA = 1_000_000
"""Extra token slots of one op (``extra=N``)."""
MAX_NUMBER = 2**63 - 1
"""Largest token id, page or count: fits the int64 of exports and other tools."""
MAX_SCENARIO_ERRORS = 20
"""Problems one scenario file reports one by one; the rest are counted ("… and N more")."""

# -- traces (``kvviz trace``) ----------------------------------------------------------------

MAX_TRACE_LINE_BYTES = 1_000_000
"""Bytes of one trace line (the longest line of the released Mooncake traces is 2.7 KB)."""
MAX_TRACE_NESTING = 16
"""Bracket depth of one trace line (a request is an object holding a list: depth 2), checked
before JSON parsing, whose recursion a line nested 1,000 deep would exhaust."""
MAX_TRACE_BLOCKS = 2_000_000
"""Hash blocks one trace read or replay may hold (prompts, plus outputs with ``--with-output``):
7x the conversation trace's 288,500; a replay costs about 400 bytes per block."""
MAX_TRACE_SKIPS_LISTED = 1_000
"""Bad lines a trace read with ``--on-error skip`` lists (all are counted): a 100 MB file of
empty objects would otherwise keep 50 million messages."""
MAX_CAPACITY_TOKENS = 10**15
"""Largest ``--capacity-tokens`` (2e12 pages of 512 tokens). kvcore's pool costs memory only
for the pages used, so any capacity up to this costs what the trace uses."""
MAX_SWEEP_BLOCKS = 30_000_000
"""Blocks one ``kvviz trace --sweep`` replays in all (choices x 12 capacities x the trace's
blocks), checked before the first replay. Every policy and both designs on the conversation
trace (8 x 12 x 288,500 = 27.7 million) fit: 93 s of CPU, measured."""

# -- the timeline as JSON lines (``kvviz run --json``) -----------------------------------------

MAX_SUBSTEP_STATE_PAGES = 2_000_000
"""Sub-step states x the cache's pages one ``kvviz run --json --substeps --states`` writes,
counted before the first line: 976 states at 2,048 pages, where a state is ~165 KB of JSON
(806 of them: 135 MB in 9.3 s CPU), or 250,000 on a demo's 8 pages. One op evicting 492 of
2,048 pages has 5,765 sub-steps: ``--json --substeps`` without ``--states`` prints them (2.5 MB)."""
MAX_STEP_STATE_PAGES = 2_000_000
"""Whole step snapshots x the cache's pages one ``kvviz run --json --snapshots`` (every step
line carrying its whole state) or ``--json --step N`` writes, checked before the first line:
976 steps at 2,048 pages, or 2 of a 1,000,000-page pool (35 MB of JSON per step there)."""
MAX_TIMELINE_JSON_ITEMS = 50_000_000
"""JSON values (numbers, strings) the states of one ``kvviz run --json`` may hold: the first
state whole, then each step's changes. Counted from the scenario before the first line, as
an upper bound of what each op can change (``timeline_json.state_items_bound``: its
allocation's tokens, and per page it holds or takes a page row, a node row, one eviction and a
heap sift). About 10 bytes a value: 500 MB at most. The 600-step Mooncake slice (5,537 pages)
is bounded at 1.7 million and writes 0.23 million (1.7 MB); a 1,000,000-page pool's first
state alone is 6 million."""

MAX_UI_OP_PAGES = 10_000
"""Pages one op may take or give back for ``kvviz run``/``demo`` to open the UI, counted from
the scenario before any op runs (an allocation's tokens and extra over the page size, at most
the pool). The UI's cost of a step grows with the pages it changed (each is a row of the trie,
the pages and the narration): measured at 8,000 pages 13 s and 130 MB, 16,000 pages 27 s and
205 MB on a loaded core. ``--print``, ``--json`` and ``kvviz check`` have their own bounds."""

# -- exports and bundles ------------------------------------------------------------------

MAX_NAME_TRIES = 1_000
"""Numbered names (``-2``, ``-3``, ...) the UI tries for an export or save before it gives up:
it never overwrites a file silently, and never searches a folder forever."""

MAX_BUNDLE_BYTES = 64 * 1024 * 1024
"""Bytes of one bug-report bundle, written or opened."""

# -- quiz (``kvviz quiz``) ----------------------------------------------------------------

MAX_ANSWER_CHARS = 1_000
"""Characters of one answer line of ``kvviz quiz --plain``; a longer line is refused whole."""
MAX_QUIZ_STEPS = 2_000
"""Steps of one scenario ``kvviz quiz`` asks about (the first ones): a question costs a look at
two frames, and a long trace slice would otherwise build every frame before the first question."""

# -- KV events (``kvviz watch``) ---------------------------------------------------------------

MAX_EVENT_PAYLOAD_BYTES = 16 * 1024 * 1024
"""Bytes of one KV-event payload (one msgpack batch). vLLM's biggest batches (a long prefill
stored in one step, a mass removal) are a few hundred KB; the recordings' largest is 35 KB."""
MAX_EVENT_ITEMS = 1_000_000
"""msgpack values (ints, strings, containers) in one payload, counted by a header scan before
msgspec decodes it: a value is one byte on the wire but up to 60 bytes decoded (a string, a
large int), so bytes alone do not bound memory. A million token ids is a 62,500-block batch."""
MAX_EVENT_CONTAINERS = 200_000
"""Arrays and maps in one payload, counted by the same scan: one byte on the wire, about 200
bytes decoded (tracemalloc: 1 MiB of empty maps took 202 MB). Two or three per event."""
MAX_EVENT_NESTING = 32
"""Container depth of one payload (a batch is 4 deep: batch, events, event, field list), checked
by the same scan: msgspec's decoder recurses, and a payload nested 200,000 deep exhausts it."""
MAX_RECORDING_BYTES = 1024 * 1024 * 1024
"""Bytes of one recording file (``--replay-file``), checked before reading: every message is
held in memory (its payload is 3/4 of its base64 text)."""
MAX_RECORDING_LINE_BYTES = 24 * 1024 * 1024
"""Bytes of one recording line: the base64 of the largest payload (21.4 MB) plus its fields."""
MAX_RECORDING_MESSAGES = 10_000_000
"""Messages one recording may hold: a file of tiny lines would otherwise build a list of 50
million messages within the byte limit."""
MAX_WATCH_RANKS = 256
"""Data-parallel ranks one ``kvviz watch`` follows (one SUB socket each, at port + rank). The
subscriber raises ZeroMQ's socket cap (1,023 by default: 341 ranks) and the soft open-files
limit to fit; measured: 1,000 ranks start in 1 s. 256 is far past any data-parallel server."""
MAX_WATCH_PENDING = 1_000_000
"""Received messages waiting for the UI to take them. When nobody takes them the subscriber's
thread waits and ZeroMQ's high-water mark holds the rest: memory stays bounded, and what the
server then drops is a gap the subscriber reports (and replays), never a silent loss."""
MAX_WATCH_PENDING_BYTES = 64 * 1024 * 1024
"""What the received messages waiting for the UI may cost in all (frames, decoded batches and
their objects, as ``kvviz.watch.subscriber.message_cost`` counts them: 37 KB for a 3.3 KB vLLM
batch, so some 1,800 of them). Past it the subscriber's thread waits, as with
``MAX_WATCH_PENDING``: ZeroMQ's high-water mark holds the rest, then the server's (a gap,
reported and replayed), never a silent loss."""
MAX_LIVE_TIMELINE_BYTES = 256 * 1024 * 1024
"""What the kept steps of a live watch's timeline may cost: each step its payload and 400 bytes
(measured 160), the UI's 300 bytes of per-step marks and totals (measured 280) when the UI
shows it, and each keyframe 400 bytes per table entry the forest copied on write since the one
before. With the shared vLLM recording's 3,000-block cache a step costs 3.7 KB and its
keyframe share 11.7 KB, so some 17,000 steps are kept (3 minutes at 100 batches/s); older
steps are folded into a keyframe (the summary still counts them). ``--record`` keeps them all."""
MAX_WATCH_FOREST_BLOCKS = 1_000_000
"""Blocks the forest a watch rebuilds may hold (blocks cached per medium). A block costs 534
bytes plus 36 per token id it carries (tracemalloc, 64,000 blocks of random 63-bit hashes:
1,149 bytes a block of 16 tokens, vLLM's default), so about 1.1 GB at the cap; a server's GPU
cache is some 10,000 to 200,000 blocks. A publisher that stores blocks and never removes them
would otherwise grow it without end: at the cap, a new block is not added (counted in the
summary's ``blocks_not_kept`` and said once, at the step it happened); the view is incomplete
from there on."""
MAX_WATCH_REPLAY_MESSAGES = 1_000_000
"""Frames one replay answer may bring before the subscriber stops reading it (vLLM buffers
10,000 batches by default)."""
MAX_WATCH_BUNDLE_STEPS = 200_000
"""Steps (messages) of one watch bundle, written or opened, checked before any message is
replayed: writing and opening are linear in the steps (a digest per step, each O(1)), about
twice ``kvviz watch --print`` of the recording; measured on 10 new blocks per step, 20,000 steps
open in 54 s on a loaded machine, so this bound is minutes, not hours, and a 64 MiB bundle of
tiny messages cannot ask for more."""

# -- every JSON file kvviz reads ------------------------------------------------------------------

MAX_JSON_INT_DIGITS = 40
"""Digits of one integer in a JSON file kvviz reads (recordings, bundles, traces, the progress
file), checked before the digits become an int (``kvviz.core.jsonread``): every integer kvviz keeps
fits 39 digits (a 128-bit hash), and Python's own bound (4,300 digits) is an exception, not a
located error."""

# -- kvviz serve --------------------------------------------------------------------------------

MAX_SERVE_MEMORY_BYTES = 4 * 1024 * 1024 * 1024
"""Memory all of ``kvviz serve``'s tabs may take together: the tab cap is this over twice the
peak a tab of the served command took when it was started once at launch (twice: a tab grows
as it is stepped). Measured (peak at open): a watch of the shipped vLLM recording (400
messages, 1.8 MB) 58 MiB, so 35 tabs (the default cap of 32 holds); of a 20,000-batch
recording (6 MB) 383 MiB, so 5; a demo 42 MiB."""

