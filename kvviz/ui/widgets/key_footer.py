# SPDX-License-Identifier: Apache-2.0
"""The key footer of every kvviz screen: Textual's compact ``Footer``, rebuilt only when the
keys it shows changed.

Textual's footer unmounts and mounts every key on each bindings signal: focus moving between
views, a screen resuming, the app starting (three times before the first frame). Its keys
then take the ``-compact`` class one by one, each a restyle of its own. At the lru demo's
start that was 270 of the app's ~600 style passes, though the keys were the same each time.
Here the footer keeps what it last showed (each shown binding, whether it is enabled, its
tooltip) and a rebuild that would show the same is skipped when it comes due; its keys are
built with ``-compact``.

Help (``?``) and quit (``q``) come first, whatever the screen's bindings: a narrow terminal
cuts the footer's right end, and those two must always be there (80x24 dropped them).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


PINNED_KEYS = ("question_mark", "q")
"""The keys shown first, in this order: help (or a hint) and quit."""


class KeyFooter(Footer):
    """A compact ``Footer`` that recomposes only when its keys change; help and quit first."""

    def __init__(self, **options) -> None:
        super().__init__(compact=True, **options)
        self._shown: tuple | None = None

    def _keys_to_show(self) -> tuple:
        """What a compose would show now: every active binding, enabled or not, its tooltip."""
        return tuple((binding, enabled, tooltip) for (_, binding, enabled, tooltip)
                     in self.screen.active_bindings.values())

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._keys_to_show()
        for widget in super().compose():
            if isinstance(widget, FooterKey) and self.compact:
                widget.add_class("-compact", update=False)  # styled once, when it mounts
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        # Textual's own, but the rebuild it asks for looks first whether the keys changed.
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        if self._shown is not None and self.is_attached and self._keys_to_show() == self._shown:
            return  # the same keys: nothing to rebuild
        await self.recompose()

    async def recompose(self) -> None:
        await super().recompose()
        self._pin()

    def _pin(self) -> None:
        """Put the help and quit keys first (a narrow footer cuts its right end)."""
        keys = {child.key: child for child in self.children if isinstance(child, FooterKey)}
        for key in reversed(PINNED_KEYS):
            if key in keys and self.children and self.children[0] is not keys[key]:
                self.move_child(keys[key], before=0)
