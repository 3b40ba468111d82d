"""Numbers as text with their unit, shared by analysis (prose), the terminal tables and the pages (stdlib only).

Two duration forms, as the two places printed them before they met here: ``fmt_ns`` (the terminal's tables and
lines: down to ns, signed values by their size) and ``fmt_ns_page`` (the web UI's ``dur`` filter and the compare
page: us at the least)."""

from __future__ import annotations


def fmt_ns(ns: float | int | None) -> str:
    """A duration in ns for the terminal: ``1.23 s`` / ``45.6 ms`` / ``789 us`` / ``12 ns`` (the unit chosen by
    the absolute value); "-" for None."""
    if ns is None:
        return "-"
    ns = float(ns)
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.0f} us"
    return f"{ns:.0f} ns"


def fmt_ns_page(ns: int | None) -> str:
    """A duration in ns for a page: "1.23 s", "45.6 ms" or "789 us" (us below 1 ms, and for negative values);
    "-" for None."""
    if ns is None:
        return "-"
    s = ns / 1e9
    return f"{s:.2f} s" if s >= 1 else f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} us"


def fmt_bytes(b: float | int | None) -> str:
    """``1.23 GiB`` / ``456.7 MiB`` / ``12.0 KiB`` / ``0 B`` (binary units); "-" for None."""
    if b is None:
        return "-"
    b = float(b)
    sign = "-" if b < 0 else ""
    b = abs(b)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= size:
            return f"{sign}{b / size:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{sign}{b:.0f} B"
