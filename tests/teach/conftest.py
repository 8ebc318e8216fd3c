# SPDX-License-Identifier: Apache-2.0
"""Every practice test keeps its progress file in a temporary data directory, never the
real home's. The exercise screen's tests drive an app headless (App.run_test): the pilot's
pace is the UI tests', and the UI tests' fixtures and ``async def`` hook are
tests/ui_fixtures.py's."""

import pytest

from tests.textual_pacing import pace_the_pilot
from tests.ui_fixtures import colours_on_in_a_scratch_directory, pytest_pyfunc_call  # noqa: F401

pace_the_pilot()  # the UI tests here drive App.run_test (tests/textual_pacing.py says why)


@pytest.fixture(autouse=True)
def data_home(tmp_path, monkeypatch):
    """A private $XDG_DATA_HOME (and HOME, so the fallback cannot reach the real one)."""
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return home
