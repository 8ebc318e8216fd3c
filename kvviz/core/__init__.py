# SPDX-License-Identifier: Apache-2.0
"""The kernel every feature stands on: pure code, no Textual, no click.

The scenario language (:mod:`.scenario`, :mod:`.vocab`, :mod:`.expect`), the session that
replays one on a backend (:mod:`.session`), the designs (:mod:`.designs`: base, trie, hash),
what changed between snapshots (:mod:`.snapshot_diff`), sub-steps and pseudo-code
(:mod:`.substeps`, :mod:`.pseudocode`), the views the widgets render (:mod:`.view`,
:mod:`.hash_view`, :mod:`.free_queue`), narration and why-queries (:mod:`.narrate`,
:mod:`.why`, :mod:`.words`, :mod:`.policy_words`), what a failure is (:mod:`.failure`), the
demos (:mod:`.demos`), the bug museum's catalogue (:mod:`.bug_museum`), the trace reader
shared by trace and watch (:mod:`.mooncake`, :mod:`.traffic`, :mod:`.tokenizer_file`) and
every size bound (:mod:`.limits`).
"""
