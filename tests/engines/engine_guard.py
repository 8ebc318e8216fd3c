# SPDX-License-Identifier: Apache-2.0
"""Import an engine (vLLM, SGLang) for these tests.

The engines live in their own venv (``bash scripts/install-engines.sh VENV``: a CPU torch and
~2.5 GB), so the README's suite does not have them: there each module here is *skipped*, with
the reason in pytest's summary, and ``.ci/run`` runs this folder a second time inside the
engine venv with ``KVVIZ_ENGINE_TESTS=1``, where a missing or broken engine *fails* instead.
So no engine test can pass by being skipped in CI.

This folder has no ``__init__.py``: a test package named like an engine could shadow it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import pytest

MODULES = {"vllm": "vllm.v1.core.kv_cache_manager", "sglang": "sglang.srt.mem_cache.radix_cache"}
REQUIRED = "KVVIZ_ENGINE_TESTS"


def require_engine(name: str):
    """The engine's cache module; skips the calling module when it is not installed, unless
    ``KVVIZ_ENGINE_TESTS=1`` (the engine venv's run), where that fails."""
    module = MODULES[name]
    required = os.environ.get(REQUIRED) == "1"
    if importlib.util.find_spec(name) is None and not required:
        pytest.skip(f"{name} is not installed: these tests run in the engine venv "
                    f"(bash scripts/install-engines.sh VENV; .ci/run does)", allow_module_level=True)
    try:
        return importlib.import_module(module)
    except BaseException as exc:
        pytest.fail(f"{name} must import here ({REQUIRED}=1 or installed) but {module} does not: "
                    f"{type(exc).__name__}: {exc}", pytrace=False)
