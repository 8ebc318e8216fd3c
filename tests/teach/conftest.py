# SPDX-License-Identifier: Apache-2.0
"""Every practice test keeps its progress file in a temporary data directory, never the
real home's."""

import pytest


@pytest.fixture(autouse=True)
def data_home(tmp_path, monkeypatch):
    """A private $XDG_DATA_HOME (and HOME, so the fallback cannot reach the real one)."""
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return home
