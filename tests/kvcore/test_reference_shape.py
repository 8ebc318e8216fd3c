# SPDX-License-Identifier: Apache-2.0
"""kvcore reads like the reference the pseudo-code pane shows: the trie's acquire and its
eviction are each one short function, and what kvviz imports from kvcore is public and
documented."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import kvcore.rows
import kvcore.state_digest

KVCORE = Path(kvcore.__file__).parent


def function_lengths(path: Path, cls: str) -> dict[str, int]:
    """Lines of each method of class ``cls`` in ``path``, docstring included."""
    tree = ast.parse(path.read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return {n.name: n.end_lineno - n.lineno + 1 for n in body if isinstance(n, ast.FunctionDef)}


def test_the_trie_acquires_in_at_most_sixty_lines_and_evicts_in_at_most_forty():
    lengths = function_lengths(KVCORE / "trie.py", "TriePagedAttentionCache")
    assert lengths["acquire_pages_for_tokens"] <= 60
    assert lengths["_evict"] <= 40


def test_the_trie_has_one_eviction_loop():
    lengths = function_lengths(KVCORE / "trie.py", "TriePagedAttentionCache")
    assert [name for name in lengths if name.startswith("_evict") and name != "_evictable_count"] == ["_evict"]


def test_the_row_encoders_and_the_state_digest_kvviz_uses_are_public_and_documented():
    names = [v for module in (kvcore.rows, kvcore.state_digest) for n, v in vars(module).items()
             if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
             and v.__module__ == module.__name__]
    assert len(names) > 15
    undocumented = [v.__name__ for v in names if not (v.__doc__ or "").strip()]
    assert undocumented == []
