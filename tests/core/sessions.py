# SPDX-License-Identifier: Apache-2.0
"""Sessions several test files build the same way."""

from __future__ import annotations

from kvviz.core.scenario import CacheConfig, Op
from kvviz.core.session import Session


def evicting_session(title: str = "") -> Session:
    """A full pool of cached chains, then one acquire that evicts many of them: an op with
    far more sub-steps than one window of states (the shape of bench_ui.py's, smaller)."""
    session = Session(CacheConfig("trie", 64, 2), title=title, check=False)
    for c in range(16):
        tokens = tuple(range(c * 8, (c + 1) * 8))
        for kind in ("acquire", "publish", "release"):
            session.apply(Op(kind, f"c{c}", tokens if kind == "acquire" else None, text=f"{kind} c{c}"))
    session.apply(Op("acquire", "big", tuple(range(1000, 1000 + 2 * 40)), text="acquire big"))
    return session
