# SPDX-License-Identifier: Apache-2.0
"""kvviz's colours: two themes of its own and fallbacks so every built-in theme works too.

Widgets and ``app.tcss`` use colours only through theme variables. Besides Textual's
standard ones (``$success``, ``$error``, ...) the views need a few of their own, named after
what they mean in the cache:

``kv-new`` / ``kv-touched`` / ``kv-evicted``
    what changed in the step: new green, touched blue, evicted red (the colours of the
    SGLang paper's RadixAttention figure).
``kv-free`` / ``kv-owned`` / ``kv-cached`` / ``kv-evictable``
    the state of a page or node: free (on the free list), owned (an allocation's unpublished
    tail), cached (held by a trie node) and referenced, cached with ref 0 (evictable).
``kv-selected``
    background of the linked selection in every view.
``kv-violation``
    pages, nodes and allocations named by a broken invariant.
``kv-muted`` / ``kv-rule``
    secondary text and frame lines: solid colours mixed from the theme's foreground and
    background. (Textual's ``$text-muted`` is an ``auto`` colour, which the Line API views
    cannot resolve in their per-span styles: on a light theme it came out white.)

The kvviz themes set all of them; for any other theme :func:`variable_defaults` derives
them from the theme's own palette (its success/error/warning colours where it has them).
"""

from __future__ import annotations

from textual.color import Color
from textual.theme import Theme

KV_VARIABLES = ("kv-new", "kv-touched", "kv-evicted", "kv-free", "kv-owned", "kv-cached", "kv-evictable",
                "kv-selected", "kv-violation", "kv-muted", "kv-rule")
"""The custom variables every theme gets (from the theme itself or from the fallbacks)."""

_DARK_FALLBACK = {
    "kv-touched": "#4f9dff",
    "kv-free": "#7c8591",
    "kv-cached": "#36c5d9",
    "kv-evictable": "#d575e8",
    "kv-selected": "#5b4a12",
}
_LIGHT_FALLBACK = {
    "kv-touched": "#1d5fd1",
    "kv-free": "#7a828c",
    "kv-cached": "#0b7f93",
    "kv-evictable": "#a2269f",
    "kv-selected": "#f6e39a",
}

KVVIZ_DARK = Theme(
    name="kvviz-dark",
    primary="#4f9dff",
    secondary="#36c5d9",
    accent="#f0b429",
    warning="#f0b429",
    error="#f05252",
    success="#3fbf6f",
    foreground="#dfe3e8",
    background="#14171c",
    surface="#1b1f26",
    panel="#252a33",
    dark=True,
    variables={
        "kv-new": "#3fbf6f",
        "kv-touched": "#4f9dff",
        "kv-evicted": "#f05252",
        "kv-free": "#7c8591",
        "kv-owned": "#f0b429",
        "kv-cached": "#36c5d9",
        "kv-evictable": "#d575e8",
        "kv-selected": "#5b4a12",
        "kv-violation": "#ff4d4d",
        "footer-key-foreground": "#f0b429",
    },
)
"""The default theme: dark, with the paper's green/blue/red for changes."""

KVVIZ_LIGHT = Theme(
    name="kvviz-light",
    primary="#1d5fd1",
    secondary="#0b7f93",
    accent="#b26a00",
    warning="#b26a00",
    error="#c81e1e",
    success="#1a7f37",
    foreground="#1f2328",
    background="#fbfbfa",
    surface="#f1f2f4",
    panel="#e3e6ea",
    dark=False,
    variables={
        "kv-new": "#1a7f37",
        "kv-touched": "#1d5fd1",
        "kv-evicted": "#c81e1e",
        "kv-free": "#7a828c",
        "kv-owned": "#b26a00",
        "kv-cached": "#0b7f93",
        "kv-evictable": "#a2269f",
        "kv-selected": "#f6e39a",
        "kv-violation": "#d00000",
        "footer-key-foreground": "#b26a00",
    },
)
"""The light theme, for projectors and printed screenshots."""

THEMES = (KVVIZ_DARK, KVVIZ_LIGHT)
DEFAULT_THEME = KVVIZ_DARK.name


def variable_defaults(theme: Theme) -> dict[str, str]:
    """Values of the kvviz variables for a theme that does not set them (any built-in theme).

    Changes and states take the theme's own success/error/warning colours where it defines
    them, so the views match the rest of the theme; the rest are fixed per dark/light.
    """
    system = theme.to_color_system().generate()
    fallback = _DARK_FALLBACK if theme.dark else _LIGHT_FALLBACK
    background = Color.parse(system["background"])
    foreground = Color.parse(system["foreground"])
    return {
        **fallback,
        "kv-muted": background.blend(foreground, 0.62).hex,
        "kv-rule": background.blend(foreground, 0.3).hex,
        "kv-new": system.get("success", "#3fbf6f"),
        "kv-evicted": system.get("error", "#f05252"),
        "kv-owned": system.get("warning", "#f0b429"),
        "kv-violation": system.get("error", "#f05252"),
    }


def set_up_appearance(app, theme: str | None = None, animations: bool = True) -> None:
    """Register kvviz's themes on ``app``, select ``theme`` (default: kvviz-dark), and turn
    animations off when asked (tests and screenshots). Shared by every kvviz app."""
    for custom in THEMES:
        app.register_theme(custom)
    app.theme = theme or DEFAULT_THEME
    if not animations:
        app.animation_level = "none"
