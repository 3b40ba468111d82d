"""The terminal tables' cells: names shortened to fit (``short_name``, ``left_short``) and number columns that
are never cut (``num_col``, ``name_room``), shared by every renderer of ``render/``. Numbers as text: ``stepscope.core.units``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def short_name(name: str, parts: int = 2) -> str:
    """The last ``parts`` dotted parts of a qualified name (``UNet2DConditionModel.forward``)."""
    segs = name.split(".")
    return ".".join(segs[-parts:]) if len(segs) > parts else name


def left_short(name: str, width: int = 48) -> str:
    """``name`` in at most ``width`` characters, shortened from the left by whole dotted parts (``…`` in
    front) so that the function name at the end (with its class) is kept whole; a last part longer than ``width`` is kept
    whole too (the table folds it)."""
    if len(name) <= width:
        return name
    segs = name.split(".")
    keep = 2 if len(segs) > 2 and segs[-2][:1].isupper() else 1  # Class.method stays whole
    out = ".".join(segs[-keep:])
    for seg in reversed(segs[:-keep]):
        if len(seg) + 1 + len(out) + 1 > width:
            break
        out = seg + "." + out
    return "…" + out


def num_col(t: Table, title: str, values: list[str], **kw) -> None:
    """Add to ``t`` a right-aligned column that is never cut: as wide as its widest value (``values``: the
    column's cells as they will be printed; ``kw``: more of ``Table.add_column``'s options)."""
    t.add_column(title, justify="right", no_wrap=True, overflow="fold",
                 min_width=max([len(title)] + [len(v) for v in values]), **kw)


def name_room(console: Console, t: Table, least: int = 24) -> int:
    """Characters left for the name column(s) of ``t`` once its number columns (already added, with
    ``min_width``) and the separators are laid out, at least ``least``: names are shortened to this, numbers
    never."""
    used = sum((c.min_width or 0) + 3 for c in t.columns if c.justify == "right") + 3
    return max(least, console.width - used)
