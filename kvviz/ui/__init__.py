# SPDX-License-Identifier: Apache-2.0
"""The Textual kit the apps share: no app of its own.

``stepping`` (moving through a timeline), ``exporting`` and ``saving`` (files that never
overwrite), ``panes`` (which panes a design shows), ``themes``, ``terminal_title``; the screens
every app may push (``screens``: prompt, help, branch) and the widgets of a cache
(``widgets``: line canvas and line view, cache column, page grid, trie, heap, free queue,
blocks, allocations, narration, code pane, timeline bar, why panel, key footer, palette).
The apps are the features': :mod:`kvviz.explore.app`, :mod:`kvviz.compare.app`,
:mod:`kvviz.watch.app`."""
