"""Backends by name: what ``--backend`` chooses. One seam, many caches.

``make_backend_factory(name)`` gives the ``backend_factory`` a :class:`~kvviz.model.session.Session`
takes: ``f(config, snapshot)`` builds a backend for the config (fresh when ``snapshot`` is
None, else restored from it). A factory with ``can_restore = False`` cannot restore
snapshots; the session then replays from frame 0 instead.
"""

from __future__ import annotations

BACKENDS = ("kvcore", "shortfin")
INSTALL_SHORTFIN = 'pip install -e ".[shortfin]"'


class BackendError(ValueError):
    """A backend that does not exist, is not installed, or cannot run this cache config."""


class BackendUnavailable(BackendError):
    """The backend's package is not installed; the message says how to install it."""


def shortfin_available() -> bool:
    """True when shortfin 3.9.0's trie cache can be imported."""
    try:
        import shortfin_apps.llm.components.kvcache.trie_attention_cache  # noqa: F401
    except ImportError:
        return False
    return True


def make_backend_factory(name: str):
    """The backend factory for ``name``: 'kvcore' (trie or base, from the config) or 'shortfin'.

    Raises :class:`BackendUnavailable` when shortfin is not installed and
    :class:`BackendError` for an unknown name.
    """
    if name == "kvcore":
        from ..model.session import kvcore_backend

        return kvcore_backend
    if name == "shortfin":
        try:
            from .shortfin_backend import ShortfinBackend
        except ImportError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
            missing = f"no module named {cause.name!r}" if cause.name else str(cause)
            raise BackendUnavailable(
                f"the shortfin backend needs shortfin 3.9.0 and the packages its LLM app imports "
                f"(tokenizers, dataclasses-json), and they are not installed ({missing}); "
                f"install them with: {INSTALL_SHORTFIN}") from None

        def shortfin_backend(config, snapshot):
            """A fresh shortfin trie cache for ``config`` (shortfin cannot restore snapshots)."""
            if snapshot is not None:
                raise BackendError("the shortfin backend cannot restore a snapshot; replay from frame 0")
            try:
                return ShortfinBackend.fresh(config.kind, config.pages, config.tokens_per_page)
            except ValueError as exc:
                raise BackendError(str(exc)) from None

        shortfin_backend.can_restore = False
        return shortfin_backend
    raise BackendError(f"unknown backend {name!r} (expected one of: {', '.join(BACKENDS)})")
