# SPDX-License-Identifier: Apache-2.0
"""Some tests here drive an app headless (App.run_test): the pilot's pace is the UI tests'."""

from tests.textual_pacing import pace_the_pilot

pace_the_pilot()  # the UI tests here drive App.run_test (tests/textual_pacing.py says why)
