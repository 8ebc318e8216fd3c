# SPDX-License-Identifier: Apache-2.0
"""The widgets of the kvviz UI, one per module, grouped by screen area.

Views (Line API, linked by selection): ``trie_view``, ``page_grid``, ``allocation_table``,
``heap_view``; text panels: ``narration``, ``why_panel``, ``code_pane`` (the pseudo-code of the
sub-step shown); chrome: ``timeline_bar``,
``command_bar``; the command palette: ``palette``. ``line_canvas`` is the one Line-API base
(strip and style caches) of the views and the timeline bar; ``line_view`` adds rows and a
cursor. The screens live in ``kvviz.ui.screens``; the frozen values every view renders
(no Textual) in ``kvviz.core.view``.
"""
