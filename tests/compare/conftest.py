# SPDX-License-Identifier: Apache-2.0
"""Some tests here drive an app headless (App.run_test): the pilot's pace is the UI tests', and
the UI tests' fixtures and ``async def`` hook are tests/ui_fixtures.py's."""

from tests.textual_pacing import pace_the_pilot
from tests.ui_fixtures import colours_on_in_a_scratch_directory, pytest_pyfunc_call  # noqa: F401

pace_the_pilot()  # the UI tests here drive App.run_test (tests/textual_pacing.py says why)
