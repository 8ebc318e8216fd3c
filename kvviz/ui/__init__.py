# SPDX-License-Identifier: Apache-2.0
"""The kvviz terminal UI (Textual): ``app`` (the timeline app and its one factory,
``make_app``), ``diff_app`` (kvcore and shortfin side by side), ``widgets`` and ``screens``,
``themes``, ``stepping`` (step actions both apps share), ``saving`` (file names that never
overwrite), ``screenshot`` (headless SVG). Only :mod:`kvviz.cli` starts it."""
