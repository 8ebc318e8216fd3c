# SPDX-License-Identifier: Apache-2.0
"""Every fuzzer here is a long Hypothesis run: all of them are ``slow`` (left out of the inner
loop, ``pytest -m "not slow"``; CI runs them)."""

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/fuzz/" in item.nodeid:
            item.add_marker(pytest.mark.slow)
