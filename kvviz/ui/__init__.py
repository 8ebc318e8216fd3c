# SPDX-License-Identifier: Apache-2.0
"""The kvviz terminal UI (Textual): ``app`` (the timeline app and its one factory,
``make_app``), whose main screen is ``screens.timeline_screen`` (reactive position,
selection, play, practice) with its actions in ``stepping``, ``playing``, ``practice`` and
``substep_panes``; ``exporting`` (the files ``e``, ctrl+s and the palette's screenshot
write); ``diff_app`` (two caches side by side, each a ``widgets.cache_column`` like the main
screen's); ``widgets`` and ``screens``, ``themes``, ``saving`` (file names that never
overwrite), ``screenshot`` (headless SVG). Only :mod:`kvviz.cli` starts it."""
