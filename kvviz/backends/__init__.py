"""Backends: the caches a session can drive. One seam, many caches.

A backend applies scenario ops to a live cache by allocation *name*, and reports state as
kvcore snapshots so every view, diff, export and the invariant checker work unchanged.
Today: kvcore's trie and base caches.
"""

from __future__ import annotations

from .kvcore_backend import KvcoreBackend, UnknownAllocation

__all__ = ["KvcoreBackend", "UnknownAllocation", "make_backend"]


def make_backend(kind: str, pages: int, tokens_per_page: int) -> KvcoreBackend:
    """A fresh backend for a cache config (kind 'trie' or 'base')."""
    return KvcoreBackend.fresh(kind, pages, tokens_per_page)
