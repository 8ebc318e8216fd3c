# SPDX-License-Identifier: Apache-2.0
"""Hypothesis profiles, chosen with ``HYPOTHESIS_PROFILE`` (default ``ci``).

- ``ci``   — what ``pytest`` runs. Ordinary property tests get Hypothesis's usual 100
             examples; tests/core/test_stateful.py scales its own budgets from the profile
             name (5,000 examples of the kvcore state machine under ``ci``).
- ``dev``  — quick feedback while editing.
- ``soak`` — a long hunt for rare interleavings:
             ``HYPOTHESIS_PROFILE=soak pytest tests/core/test_stateful.py`` (200,000 examples).

Deadlines are off: timings on a shared 2-core CI machine are noise, not bugs. ``print_blob``
prints a reproduction blob for every failure so it can be replayed with ``@reproduce_failure``.
"""

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])

settings.register_profile("ci", max_examples=100, **_COMMON)
settings.register_profile("dev", max_examples=30, **_COMMON)
settings.register_profile("soak", max_examples=10_000, **_COMMON)

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
