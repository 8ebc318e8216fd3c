# SPDX-License-Identifier: Apache-2.0
"""Backends by name, and what `--backend shortfin` says when shortfin is not installed.

These run with or without shortfin: the missing install is simulated."""

from __future__ import annotations

import sys

import click
import pytest

from kvviz.commands import backend_factory
from kvviz.core.scenario import CacheConfig
from kvviz.backends.registry import (
    INSTALL_SHORTFIN,
    BackendError,
    BackendUnavailable,
    make_backend_factory,
)
from kvviz.backends.kvcore_backend import kvcore_backend

TRIE_MODULE = "shortfin_apps.llm.components.kvcache.trie_attention_cache"
BACKEND_MODULE = "kvviz.backends.shortfin_backend"


@pytest.fixture
def without_shortfin(monkeypatch):
    """Make every `import shortfin_apps...` fail, as on a machine without the extra (and forget
    our shortfin backend, so that importing it again meets the failure)."""
    for name in [TRIE_MODULE] + [m for m in sys.modules if m.split(".")[0] == "shortfin_apps"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, BACKEND_MODULE, raising=False)


def test_kvcore_is_the_default_backend_and_restores_snapshots():
    factory = make_backend_factory("kvcore")
    assert factory is kvcore_backend
    assert factory(CacheConfig(), None).can_restore is True


def test_an_unknown_backend_names_the_known_ones():
    with pytest.raises(BackendError, match="unknown backend 'tensorrt' \\(expected one of: kvcore, shortfin, vllm, "
                                           "sglang\\)"):
        make_backend_factory("tensorrt")


def test_without_shortfin_the_backend_says_how_to_install_it(without_shortfin):
    with pytest.raises(BackendUnavailable) as info:
        make_backend_factory("shortfin")
    assert INSTALL_SHORTFIN == 'pip install -e ".[shortfin]"'
    assert INSTALL_SHORTFIN in str(info.value)


def test_without_shortfin_the_cli_exits_2_with_the_install_command(without_shortfin):
    with pytest.raises(click.ClickException) as info:
        backend_factory("shortfin", None)
    assert info.value.exit_code == 2 and INSTALL_SHORTFIN in info.value.format_message()


def test_base_on_the_shortfin_backend_is_bad_input():
    with pytest.raises(click.ClickException, match="--base runs kvcore's base cache") as info:
        backend_factory("shortfin", "base")
    assert info.value.exit_code == 2


def test_a_broken_module_of_ours_is_not_reported_as_shortfin_missing(monkeypatch):
    """A failing import inside kvviz is a bug to see, not a missing install to hide (the old
    registry turned every ImportError into 'install shortfin')."""
    monkeypatch.delitem(sys.modules, BACKEND_MODULE, raising=False)
    monkeypatch.setitem(sys.modules, "kvviz.backends.shortfin_reader", None)
    with pytest.raises(ImportError) as info:
        make_backend_factory("shortfin")
    assert not isinstance(info.value, BackendError) and info.value.name == "kvviz.backends.shortfin_reader"
