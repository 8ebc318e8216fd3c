# SPDX-License-Identifier: Apache-2.0
"""UI kit test setup: deterministic apps (no animations, no cursor blink, colours on), from
tests/ui_fixtures.py, which every feature's folder shares."""

from __future__ import annotations

import pytest

from tests.textual_pacing import pace_the_pilot
from tests.ui_fixtures import app_on, colours_on_in_a_scratch_directory, leaky, lru, pytest_pyfunc_call, small  # noqa: F401

pace_the_pilot()  # the UI tests here drive App.run_test (tests/textual_pacing.py says why)


@pytest.fixture(autouse=True)
def _colour_and_calm(colours_on_in_a_scratch_directory):
    """Every test here: colours on, a scratch working directory."""
