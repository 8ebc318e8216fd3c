# SPDX-License-Identifier: Apache-2.0
"""The scenario language's documentation: :data:`SCENARIO_HELP` (``kvviz help scenarios``)
and :data:`SCENARIO_EXAMPLE`, a complete scenario the tests run. The expect table comes from
:data:`kvviz.core.expect.EXPECT_KINDS`, so a new kind documents itself."""

from __future__ import annotations

import textwrap

from kvviz.core.limits import MAX_PAGES, MAX_SCENARIO_ERRORS, MAX_TOKENS_PER_OP, MAX_TOKENS_PER_PAGE, MAX_TOKENS_PER_SCENARIO
from kvviz.core.expect import EXPECT_KINDS

__all__ = ["SCENARIO_EXAMPLE", "SCENARIO_HELP"]

SCENARIO_EXAMPLE = """\
title: Two requests share a system prompt
description: r2 starts with the same 8 tokens as r1, so once r1 has published its pages
description: r2 reuses them and needs one new page.
cache trie pages=8 tokens_per_page=4

> r1 arrives: 8 prompt tokens fill two pages; extra=4 reserves a third for decoding.
acquire r1 "You are a helpful assistant" 1..3 extra=4
expect ok
expect hit r1 0
expect free 5

> Publishing puts r1's two full pages in the trie, where later requests can find them.
publish r1
expect cached 2
expect owned 1

> r2 matches both pages (8 tokens) and takes one new page for its last 2 tokens.
acquire r2 "you are a helpful assistant" 1..3 9 10
expect hit r2 8
expect free 4

> r1 is done. Its shared pages stay: r2 still references them (ref 1).
release r1
expect free 5
expect evictable 0
expect live r2

> 40 tokens need 10 pages, more than the pool has: the acquire fails and changes nothing.
acquire r3 1..40
expect fail alloc
expect free 5

> r2 finishes too. Nothing references the shared pages now, so eviction may take them.
release r2
expect free 6
expect evictable 2

> Retry with 28 tokens (7 pages): 6 free pages, then the least recently used leaf goes.
acquire r3 1..28
expect evictions 1
expect evicted 1
expect cached 1
expect ref 0 0

> Grow r3 by two tokens plus two slots: the last cached page goes too.
extend r3 + 29 30 extra=2
expect evicted 0
expect cached 0
expect free 0

release r3
expect free 8
expect live
"""
"""A complete scenario, shown in the help; the tests check that it parses and passes."""


def _expect_table() -> str:
    width = max(len(form.usage) for form in EXPECT_KINDS.values())
    return "\n".join(f"  {form.usage:<{width}}  {form.meaning}" for form in EXPECT_KINDS.values())


SCENARIO_HELP = f"""\
Scenario files (.kvs)

A scenario is a script of operations on a KV cache. The same language is used by demo
files, the command bar of the UI (one op or expect line per command) and the scripts
inside exports.
Lines are read one at a time; keywords are case-insensitive, extra spaces are fine and
commas may separate tokens.

Comments and blank lines
  # starts a comment that runs to the end of the line (but not inside "quotes", and not
  in prose: title, description and narration lines keep their # characters).

Header (before the first op)
  title: TEXT              the scenario's title
  description: TEXT        one paragraph; several description lines are joined with spaces
  cache KIND pages=N tokens_per_page=M [policy=P] [recompute_last_token=yes|no]
                           KIND is trie (prefix sharing), base (no sharing) or
                           hash (vLLM's design: full blocks cached under chained
                           keys, no tree; one free queue of ref-0 pages, taken from
                           its head; a released page keeps its block, matchable,
                           until it is taken again: lazy eviction; a hash cache
                           takes policy=lru only, its queue's order);
                           P is the trie's eviction policy: lru (default), fifo,
                           lfu, mru, filo, slru or priority (evicted first: the
                           least recent, oldest, least hit, most recent, newest,
                           least recent of those hit fewer than twice, least
                           recent of lowest priority);
                           recompute_last_token=yes (hash only) is vLLM's rule:
                           a hit covers at most all tokens but the last, so a
                           prompt whose every block is cached recomputes (and
                           caches again) its last block;
                           page_size= and tpp= mean tokens_per_page=;
                           pages 1..{MAX_PAGES:,}, tokens_per_page 1..{MAX_TOKENS_PER_PAGE:,}.
  Without a cache line: cache trie pages=8 tokens_per_page=4.

Ops (NAME names an allocation: letters, digits, _ . -, not starting with a digit)
  acquire NAME TOKENS [extra=N] [priority=N]
                                   a new allocation holding TOKENS, with N more token slots;
                                   priority=N (0 by default, at most 2**63 - 1) is what
                                   policy=priority evicts by: a node keeps the highest
                                   priority of the allocations that published or matched
                                   it, and the lowest priority goes first (other policies
                                   keep it but do not look at it)
  publish NAME [TOKENS]            share its full pages in the trie (TOKENS: what decode wrote)
  extend NAME TOKENS [extra=N]     grow it; TOKENS is the whole new list and must start
                                   with the allocation's current tokens
  extend NAME + TOKENS [extra=N]   grow it by appending TOKENS
  release NAME                     free it; published pages stay cached for reuse

  Acquiring a name that is still live, or using a name that is not live, is an error.
  An op followed by 'expect fail' is taken to have changed nothing, so a failed acquire
  can be retried under the same name.

Tokens
  7                        one token id (a whole number)
  1..8                     an inclusive range: 1 2 3 4 5 6 7 8 (never descending)
  "You are a helpful"      words, split on spaces; each word has a stable id from a small
                           built-in vocabulary (case-insensitive), so views can show words;
                           punctuation stays part of its word ("you," is not "you")
  acquire NAME alone holds no tokens. Every list counts: one line (an op, or an expect's
  list of pages or names) may spell at most {MAX_TOKENS_PER_OP:,} values, a whole scenario
  {MAX_TOKENS_PER_SCENARIO:,}; ranges count as the values they stand for.

Narration
  > TEXT                   shown with the next op; consecutive > lines join with spaces,
                           a line with just > starts a new paragraph

Expectations (checked after the op above them; a scenario is also a test)
  A page is free, owned or cached; a cached page is referenced (ref > 0) or evictable
  (ref 0). These are the pool legend's words: its cached N is expect cached's count.
{_expect_table()}

  alloc is CacheAllocationFailure (not enough free and evictable pages); invalid is
  InvalidOperation (misuse, e.g. extending with tokens that do not continue the old ones).
  An expect line before the first op is an error. Page lists take ranges: expect pages r1 0..3.

Lines for one cache kind
  [KIND ...] before an expect or narration line scopes it to those cache kinds, so one
  script can tell and check the truth of both a trie run and a --base run:
    [trie] expect hit r2 8          checked only when the cache is a trie
    [base] expect fail alloc        checked only on the base cache
    [trie] > The trie matches both pages.
    [base] > The base cache has no lookup: r2 gets new pages.
  KIND is trie, base or hash; [trie base] names two. An untagged line is written for the
  kind in the cache line and checked on that kind only; `kvviz compare` and --base run the
  other kinds on their tagged lines. An expect a kind cannot mean is refused where it would
  be checked on it (expect candidates on a hash cache, which has no heap).
  Consecutive narration lines of one scope form a paragraph; a change of scope starts a
  new one. A scoped 'expect fail' does not make the parser forget the op's allocation
  (the op succeeds on the other kind), an unscoped one does, and so does one tagged with
  every kind the script has named so far (its cache line's and its tags'). Ops cannot be
  scoped.

Errors
  Every mistake is reported with its file, line and column and what was expected there:
    demo.kvs:7:14: bad token '1..x' (expected: an integer, a range like 1..8, or "quoted words")
  A file with several mistakes reports each of them (up to {MAX_SCENARIO_ERRORS}, then how many more).

Example
{textwrap.indent(SCENARIO_EXAMPLE, "  ")}"""
"""The full description of the language, shown by ``kvviz help scenarios``."""
