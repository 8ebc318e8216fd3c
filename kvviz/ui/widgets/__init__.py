"""The widgets of the kvviz UI, one per module, grouped by screen area.

Views (Line API, linked by selection): ``trie_view``, ``page_grid``, ``allocation_table``,
``heap_view``; text panels: ``narration``, ``why_panel``; chrome: ``timeline_bar``,
``command_bar``; screens: ``help_screen``, ``prompt_screen``, ``branch_screen``; the command
palette: ``palette``. ``frame_view`` holds the pure values every view renders (no Textual).
"""
