# SPDX-License-Identifier: Apache-2.0
"""The one place the tests change Textual: the pilot's pace, for the UI tests (App.run_test).

What it changes, and why. After each key (twice) and at each pause, Textual's pilot waits for
"idle" (``textual._wait.wait_for_idle``): it sleeps ``SLEEP_GRANULARITY`` (1/50 s) at a time
until one sleep passes with under ``SLEEP_IDLE`` (1 ms) of CPU. A screen paints at most every
``UPDATE_PERIOD`` (1/60 s), so a frame asked for before a sleep comes inside it. The last sleep
is always idle, so each key cost at least 40 ms of wall time: 66 ms a key on the lru demo
against 15 ms of CPU (measured). Here:

- each sleep of the wait is 1/400 s (``textual._wait.SLEEP_GRANULARITY``, read at each sleep);
- a screen may paint every 1/500 s (``textual.screen.UPDATE_PERIOD``, read when a screen
  starts its update timer), so a frame asked for still comes inside one sleep: what waits
  for the next frame (the footer's rebuild) has run when the pilot calls the app idle;
- what it does *not* change: the wait's minimum (``wait_for_idle(min_sleep=...)`` bound its
  default, 1/50 s, when Textual defined it) and the 1 ms rule. A rule scaled down with the
  sleep (1/8 ms) was too tight: the event loop's own wake-up costs 0.1-0.3 ms, and waits ran
  to their 1 s cap. Keeping Textual's 60 fps frames let the pilot call the app idle before the
  footer's rebuild, and a test failed every time.

A key then costs 17 ms. Both names are private to Textual (``UPDATE_PERIOD`` is even
``Final``), so this holds for the pinned Textual only: :func:`pace_the_pilot` refuses any
other version rather than patch names that may mean something else there. (The frame rate,
``TEXTUAL_FPS``, cannot be used instead: pytest-textual-snapshot imports Textual before any
conftest runs.) Modelled on memray's ``_textual_hacks.py``.
"""

from __future__ import annotations

import textual
import textual._wait
import textual.screen

PINNED_TEXTUAL = "8.2.8"
"""The Textual these constants were measured on (pyproject.toml pins it exactly)."""

SLEEP = 1 / 400
FRAME = 1 / 500


def pace_the_pilot() -> None:
    """Set the pilot's pace (idempotent); a different Textual is an error, not a guess."""
    version = getattr(textual, "__version__", None)
    if version != PINNED_TEXTUAL:
        raise RuntimeError(f"tests/textual_pacing.py was measured on Textual {PINNED_TEXTUAL}, "
                           f"this is {version}: measure again and update it with the pin")
    for module, name in ((textual._wait, "SLEEP_GRANULARITY"), (textual.screen, "UPDATE_PERIOD")):
        if not isinstance(getattr(module, name, None), float):
            raise RuntimeError(f"tests/textual_pacing.py: Textual has no {module.__name__}.{name}")
    textual._wait.SLEEP_GRANULARITY = SLEEP
    textual.screen.UPDATE_PERIOD = FRAME
