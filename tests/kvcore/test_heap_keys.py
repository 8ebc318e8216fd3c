# SPDX-License-Identifier: Apache-2.0
"""Eviction keys: ``(last_access, seq)`` packed into one int by one helper, in the module
of the policy table."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import kvcore
from kvcore.policies import SEQ_BITS, pack_key, unpack_key

KVCORE = Path(kvcore.__file__).parent
ticks = st.integers(0, 2**62)
seqs = st.integers(0, 2**SEQ_BITS - 1)


@given(a=st.tuples(ticks, seqs), b=st.tuples(ticks, seqs))
def test_packed_keys_order_like_the_tuples_and_unpack_to_them(a, b):
    assert (pack_key(*a) < pack_key(*b)) == (a < b)
    assert unpack_key(pack_key(*a)) == a


def test_only_the_policy_module_packs_keys_by_hand():
    """Every ``<< SEQ_BITS`` lives in policies.py, beside the table of policies."""
    offenders = []
    for path in sorted(KVCORE.glob("*.py")):
        if path.name == "policies.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.LShift):
                right = node.right
                if isinstance(right, ast.Name) and right.id == "SEQ_BITS":
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
