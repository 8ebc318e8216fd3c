# SPDX-License-Identifier: Apache-2.0
"""The snapshot's JSON rows: one encoder per row type (:meth:`kvcore.Snapshot.to_dict`'s
rows), canonical JSON, and the texts of the rows :meth:`Snapshot.to_json` encoded last.

Consecutive snapshots share their unchanged row objects (rows are frozen and hold tuples), so
the rows of the last snapshot encoded are kept with their text and only new rows are encoded
again: :meth:`Snapshot.to_json`, :meth:`Snapshot.digest` and :mod:`kvcore.state_digest` cost
what changed. kvviz's JSON timeline writes a step's changed rows with the same encoders.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import KVCacheError

#: Pages of the largest pool whose snapshot :meth:`Snapshot.to_dict`, ``to_json`` and
#: ``digest`` serialise. The format lists every page's row and every free page, so a bigger
#: pool's text grows with its pages, not with what it used (10**12 pages: terabytes);
#: 2,097,152 pages is about 73 MB of JSON and 240 MB of rows (measured scaling 2**18). Twice kvviz's largest scenario
#: pool; check, compare and restore have no such limit (they cost the pages used).
MAX_SERIALISED_PAGES = 1 << 21


class SnapshotTooLarge(KVCacheError, ValueError):
    """A snapshot of a pool above :data:`MAX_SERIALISED_PAGES` pages asked for its JSON form,
    its dict or its digest: refused before any row is built."""


def refuse_serialising(snapshot) -> None:
    """Raise :class:`SnapshotTooLarge` for a snapshot above :data:`MAX_SERIALISED_PAGES` pages."""
    if snapshot.page_count > MAX_SERIALISED_PAGES:
        raise SnapshotTooLarge(
            f"a snapshot of {snapshot.page_count:,} pages is too large to serialise: to_dict, to_json and "
            f"digest list every page, and MAX_SERIALISED_PAGES ({MAX_SERIALISED_PAGES:,}) is the limit "
            f"(compare snapshots with ==, check them with check_snapshot)")


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"))`` without building an encoder
#: per call (dumps does, for any non-default argument): the canonical JSON of
#: :meth:`Snapshot.to_json` and :mod:`kvcore.state_digest`.
canonical_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode

#: Row texts of the snapshot :meth:`Snapshot.to_json` encoded last: ``id(row) -> (row,
#: text)``. Holding the row keeps its id from being reused while the entry exists.
_row_texts: dict[int, tuple[Any, str]] = {}


def row_text(row: Any, convert) -> str:
    """``canonical_json(convert(row))``, reusing the text :meth:`Snapshot.to_json` wrote last
    for this very row object (rows are frozen, so a kept text never goes stale)."""
    hit = _row_texts.get(id(row))
    return hit[1] if hit is not None and hit[0] is row else canonical_json(convert(row))


def rows_text(rows, convert, kept: dict[int, tuple[Any, str]]) -> str:
    """The JSON list of ``rows`` encoded by ``convert``, reusing the texts kept last; each
    row's ``(row, text)`` goes into ``kept`` (for :func:`keep_row_texts`)."""
    seen = _row_texts
    parts = []
    for row in rows:
        hit = seen.get(id(row))
        if hit is None or hit[0] is not row:  # (the entry holds the row: its id is not reused)
            hit = (row, canonical_json(convert(row)))
        kept[id(row)] = hit
        parts.append(hit[1])
    return "[" + ",".join(parts) + "]"


def keep_row_texts(kept: dict[int, tuple[Any, str]]) -> None:
    """Keep ``kept`` (one snapshot's row texts, from :func:`rows_text`) for the next encoding."""
    global _row_texts
    _row_texts = kept


def page_row(p) -> list:
    """A page's row (a ``PageInfo``) in :meth:`Snapshot.to_dict`: ``[page, state, owner, node, ref]``."""
    return [p.page, p.state, p.owner, p.node, p.ref]


# A node row has seven fields, then hits and priority only when either is not 0 (an
# allocation row likewise its priority): a snapshot that never used a policy's fields writes
# the short rows, and both forms read back under one schema, kvcore.snapshot/1.

def node_row(n) -> list:
    """A node's row (a ``NodeInfo``) in :meth:`Snapshot.to_dict`: ``[id, parent, tokens, page,
    ref, last_access, seq]``, then ``hits, priority`` when either is not 0."""
    row = [n.id, n.parent, list(n.tokens), n.page, n.ref, n.last_access, n.seq]
    if n.hits or n.priority:
        row += (n.hits, n.priority)
    return row


def block_row(b) -> list:
    """A hash block's row (a ``BlockInfo``) in :meth:`Snapshot.to_dict`: ``[id, page, key,
    parent, tokens, reachable]``."""
    return [b.id, b.page, b.key, b.parent, list(b.tokens), b.reachable]


def allocation_row(a) -> dict[str, Any]:
    """An allocation's row (an ``AllocationInfo``) in :meth:`Snapshot.to_dict`: an object of its
    fields, ``priority`` only when not 0."""
    row = {"id": a.id, "name": a.name, "tokens": list(a.tokens), "pages": list(a.pages),
           "published": a.published, "hit_tokens": a.hit_tokens, "released": a.released}
    if a.priority:
        row["priority"] = a.priority
    return row
