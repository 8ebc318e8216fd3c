"""Every size kvviz bounds, in one place: big enough for real traces, small enough that no
input can exhaust memory or time. Each limit is checked before the work it bounds starts,
and each is tested at its edge. The README's "Limits" section lists them.
"""

from __future__ import annotations

# -- scenarios (the .kvs language) --------------------------------------------------------

MAX_SOURCE_BYTES = 5_000_000
"""Bytes of one scenario file (or command-bar line)."""
MAX_PAGES = 1_000_000
"""Pages of one cache (``cache trie pages=N``)."""
MAX_TOKENS_PER_PAGE = 65_536
MAX_TOKENS_PER_OP = 1_000_000
"""Tokens one op (or one ``expect`` list) may spell out, after ranges and words expand."""
MAX_TOKENS_PER_SCENARIO = 10_000_000
"""Tokens a whole scenario may spell out: a 5 MB file of big ranges must not need 100 GB."""
MAX_EXTRA = 1_000_000
MAX_NUMBER = 2**63 - 1
"""Largest token id, page or count: fits the int64 of exports and other tools."""
MAX_SCENARIO_ERRORS = 20
"""Problems one scenario file reports one by one; the rest are counted ("… and N more")."""

# -- exports and bundles ------------------------------------------------------------------

MAX_BUNDLE_BYTES = 64 * 1024 * 1024
"""Bytes of one bug-report bundle, written or opened."""
