# SPDX-License-Identifier: Apache-2.0
"""The kinds of bundle ``kvviz open`` reads besides a scenario's bug report.

A feature that writes bundles of its own (``kvviz watch -o X.json``) registers a
:class:`BundleKind` here, and ``open`` asks each kind in turn whether a file is one of its
own before it reads the file as a scenario's bundle. So ``open`` (explore) finds a watch
bundle without importing the watch feature: :mod:`kvviz.cli`, which sees every feature,
wires the kinds in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BundleKind", "bundle_kind_of", "register_bundle_kind"]


@dataclass(frozen=True)
class BundleKind:
    """A kind of bundle: its ``name``, whether a file at a path ``recognizes`` as one (cheap:
    it reads the head of the file), and how to ``open`` it (the path, and ``print_only``)."""

    name: str
    recognizes: Callable[[str], bool]
    open: Callable[[str, bool], None]


_KINDS: dict[str, BundleKind] = {}


def register_bundle_kind(kind: BundleKind) -> None:
    """Add ``kind`` (again under the same name: replaced, so wiring twice is harmless)."""
    _KINDS[kind.name] = kind


def bundle_kind_of(path: str) -> BundleKind | None:
    """The registered kind that recognizes ``path``, in registration order, or None (a
    scenario's bundle, or not a bundle at all: the scenario reader says which)."""
    for kind in _KINDS.values():
        if kind.recognizes(path):
            return kind
    return None
