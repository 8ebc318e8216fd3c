# SPDX-License-Identifier: Apache-2.0
"""Two caches side by side, and the failures they find.

- :mod:`.engine`: run one scenario on two sides (designs, policies or backends) and find the
  first step where they differ; :mod:`.app` shows the two sides in the UI.
- :mod:`.failure`: a scenario's first failure in a mode (one backend, or a diff).
- :mod:`.shrink`: a failing scenario cut to a minimal one that fails the same way;
  :mod:`.fuzz`: random scenarios until one fails, each class shrunk.
- The commands: ``compare``, ``diff`` (compare with another backend on the right), ``shrink``, ``fuzz``.
"""
