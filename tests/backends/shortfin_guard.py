# SPDX-License-Identifier: Apache-2.0
"""Import shortfin for these tests: skip only when it is not installed, fail loudly when it
is installed but does not import (a broken install, or a test package shadowing one of
its dependencies must not silently skip the suite).

This folder has no ``__init__.py`` on purpose: a test package named ``shortfin`` on
``sys.path`` could shadow shortfin itself. Test module names here start with
``test_shortfin_`` so they stay unique.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

TRIE_MODULE = "shortfin_apps.llm.components.kvcache.trie_attention_cache"


def require_shortfin():
    """shortfin's trie cache module; skips the calling test module if shortfin is not installed."""
    if importlib.util.find_spec("shortfin_apps") is None or importlib.util.find_spec("shortfin") is None:
        pytest.skip('shortfin is not installed (pip install -e ".[shortfin]")', allow_module_level=True)
    try:
        return importlib.import_module(TRIE_MODULE)
    except BaseException as exc:  # shortfin_apps calls pytest.skip itself when a dependency fails
        pytest.fail(f"shortfin is installed but {TRIE_MODULE} does not import: {type(exc).__name__}: {exc}. "
                    f"Is a package under tests/ shadowing one of its dependencies (a tests/packaging "
                    f"package would shadow `packaging`, which dataclasses-json needs)?", pytrace=False)
