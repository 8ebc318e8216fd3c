# SPDX-License-Identifier: Apache-2.0
"""Backends by name: what ``--backend`` and a bundle's ``backend.name`` choose.

``make_backend_factory(name)`` gives the :class:`~kvviz.backends.BackendFactory` a session
takes. Importing a backend happens here, on demand, so kvviz runs without the optional
packages of backends nobody asked for.
"""

from __future__ import annotations

from types import MappingProxyType

from kvviz.extras import install_command
from kvviz.backends import HASH, TRIE, BackendError, BackendFactory, BackendUnavailable
from kvviz.backends.kvcore_backend import kvcore_backend

__all__ = ["BACKENDS", "DIFF_BACKEND", "ENGINE_KINDS", "INSTALL_ENGINES", "INSTALL_SHORTFIN", "MUSEUM_PREFIXES",
           "REFERENCE_BACKEND", "BackendError",
           "BackendUnavailable", "make_backend_factory"]

BACKENDS = ("kvcore", "shortfin", "vllm", "sglang")
"""The names ``make_backend_factory`` knows (``--backend``'s choices)."""

REFERENCE_BACKEND = "kvcore"
"""The backend the others are checked against: kvcore's caches are the spec, with no known
issues (``kvviz diff``'s left side)."""

DIFF_BACKEND = "shortfin"
"""The backend ``kvviz diff`` runs against :data:`REFERENCE_BACKEND`, its trie against kvcore's."""

MUSEUM_PREFIXES = MappingProxyType({"kvcore": "bug-", "shortfin": "shortfin-", "sglang": "sglang-"})
"""The bug museum's demo names, by the backend an exhibit runs on: real cache bugs replayed on
kvcore (``bug-b4b-root-ref``), then the same bugs live on shortfin's own cache
(``shortfin-b9-...``, which need ``--backend shortfin``). Each name is the prefix, the
docs/bugs.md id, then what the bug is; the demos and the bug museum's code panes read it here."""

INSTALL_SHORTFIN = install_command("shortfin")
"""The command that installs the shortfin backend's packages (quoted in its error)."""

INSTALL_ENGINES = "bash scripts/install-engines.sh VENV"
"""The command that installs vLLM 0.33.0 and SGLang 0.5.23 (CPU torch pinned) into a venv, from a
checkout of kvviz (a pip extra cannot say ``--no-deps``; the script can)."""

ENGINE_KINDS = MappingProxyType({"shortfin": TRIE, "vllm": HASH, "sglang": TRIE})
"""The cache kind each foreign backend drives: what ``kvviz diff --backend NAME`` compares with
kvcore's design of the same kind."""

# Modules whose failing import means a bug of ours, never "not installed".
_OWN_PACKAGES = ("kvviz", "kvcore")


def make_backend_factory(name: str) -> BackendFactory:
    """The backend factory for ``name``: 'kvcore' (trie or base, from the config) or 'shortfin'.

    Raises :class:`~kvviz.backends.BackendUnavailable` when shortfin is not installed and
    :class:`~kvviz.backends.BackendError` for an unknown name.
    """
    if name == "kvcore":
        return kvcore_backend
    if name == "shortfin":
        return _shortfin_factory()
    if name == "vllm":
        return _vllm_factory()
    if name == "sglang":
        return _sglang_factory()
    raise BackendError(f"unknown backend {name!r} (expected one of: {', '.join(BACKENDS)})")


def _shortfin_factory() -> BackendFactory:
    try:
        from kvviz.backends.shortfin_backend import shortfin_backend
    except ImportError as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
        if (cause.name or "").split(".")[0] in _OWN_PACKAGES:
            raise  # a bug inside kvviz must not pass for a missing install
        missing = f"no module named {cause.name!r}" if cause.name else str(cause)
        raise BackendUnavailable(
            f"the shortfin backend needs shortfin 3.9.0 and the packages its LLM app imports "
            f"(tokenizers, dataclasses-json), and they are not installed ({missing}); "
            f"install them with: {INSTALL_SHORTFIN}") from None
    return shortfin_backend


def _missing(exc: ImportError) -> str:
    """What an ImportError says is missing; re-raises one that is a bug of ours."""
    cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
    if (cause.name or "").split(".")[0] in _OWN_PACKAGES:
        raise exc  # a bug inside kvviz must not pass for a missing install
    return f"no module named {cause.name!r}" if cause.name else str(cause)


def _vllm_factory() -> BackendFactory:
    try:
        from kvviz.backends.vllm_backend import vllm_backend
    except ImportError as exc:
        raise BackendUnavailable(
            f"the vllm backend needs vLLM 0.33.0 and a CPU torch, and they are not installed "
            f"({_missing(exc)}); install them into a venv with: {INSTALL_ENGINES}") from None
    return vllm_backend


def _sglang_factory() -> BackendFactory:
    try:
        from kvviz.backends.sglang_backend import sglang_backend
    except ImportError as exc:
        raise BackendUnavailable(
            f"the sglang backend needs SGLang 0.5.23 and a CPU torch, and they are not installed "
            f"({_missing(exc)}); install them into a venv with: {INSTALL_ENGINES}") from None
    return sglang_backend
