"""``stepscope diff --format markdown``: a ``Diff`` as GitHub-flavoured Markdown, in the diff's order: the verdict,
the compared unit, the per-span and per-step tables, the functions that took the change, the environment changes
and the notes. Pure: ``to_markdown(diff) -> str``.

Names go in code spans (a ``__call__`` or ``<lambda>`` is not taken for emphasis or HTML) with ``|`` escaped (a
table cell ends at a bare one); prose is escaped character by character (``text``).
"""

from __future__ import annotations

import os

from ...analysis.diff import Diff
from ...analysis.timestats import TimeChange
from ...core.units import fmt_ns
from ..terminal.diff import change_text  # (the same text as the terminal's: one place says it)

#: characters escaped with a backslash in prose (those that would start emphasis, a link, HTML, a code span,
#: strike-through or an entity, or end a table cell)
_SPECIAL = set("\\`*_[]<>|~&")


def text(s: str) -> str:
    """``s`` as Markdown prose: one line, its special characters escaped."""
    s = " ".join(str(s).split())
    return "".join("\\" + c if c in _SPECIAL else c for c in s)


def code(s: str) -> str:
    """``s`` as an inline code span fit for a table cell (``|`` escaped, one line)."""
    s = " ".join(str(s).split()).replace("|", "\\|")
    if not s:
        return ""
    fence = "``" if "`" in s else "`"
    pad = " " if fence == "``" or s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _short(name: str, parts: int = 3) -> str:
    segs = name.split(".")
    return ".".join(segs[-parts:]) if len(segs) > parts else name


def _verdict_cell(tc: TimeChange) -> str:
    v = "no CI (< 3 repeats)" if tc.ci_low is None and tc.change is not None and not tc.only_in else tc.verdict
    return f"**{text(v)}**" if tc.significant else text(v)


def table(head: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """A GFM table: ``head`` (escaped here), ``rows`` (cells already Markdown), columns in ``right`` aligned right."""
    out = ["| " + " | ".join(text(h) for h in head) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(c if c else " " for c in r) + " |" for r in rows]
    return out


def _times(rows: list[TimeChange], label: str, name=lambda r: code(_short(r.name))) -> list[str]:
    return table([label, "A", "B", "n A/B", "change of median (95% CI)", "verdict"],
                 [[name(r), fmt_ns(r.median_a_ns) if r.n_a else "-", fmt_ns(r.median_b_ns) if r.n_b else "-",
                   f"{r.n_a}/{r.n_b}", text(change_text(r)), _verdict_cell(r)] for r in rows], right={1, 2, 3, 4})


def to_markdown(d: Diff, failed: str | None = None, max_spans: int = 20, max_steps: int = 50) -> str:
    """The diff as Markdown (see the module doc). ``failed``: a line saying why the comparison fails a build
    (``--fail-if``), shown first; ``max_spans``/``max_steps``: rows of those tables (the rest counted)."""
    h = d.headline
    out = [f"### stepscope diff: A {code(d.run_a)} → B {code(d.run_b)}", ""]
    if failed:
        out += [f"> **Failed:** {text(failed)}", ""]
    out += [f"**Verdict:** {text(d.verdict)}", ""]
    out += _times([h], "compared unit", lambda r: text(d.unit_label)) + [""]
    if d.phases:
        out += ["#### Start-up apart from the work", ""]
        out += table(["phase", "A", "B"], [[text(p.name.strip()), fmt_ns(p.a_ns), fmt_ns(p.b_ns)] for p in d.phases],
                     right={1, 2}) + [""]
    if d.spans:
        out += ["#### Per span name (median of its calls)", ""] + _times(d.spans[:max_spans], "span") + [""]
        if len(d.spans) > max_spans:
            out += [f"… {len(d.spans) - max_spans} more span names (`stepscope diff --json` lists them all)", ""]
    if d.steps:
        out += ["#### Per denoising step", ""] + _times(d.steps[:max_steps], "step", lambda r: text(r.name)) + [""]
        if len(d.steps) > max_steps:
            out += [f"… {len(d.steps) - max_steps} more steps", ""]
    if d.functions:
        grew = "grew" if h.change is None or h.change >= 0 else "shrank"
        out += [f"#### Functions whose self time {grew} most ({text(d.normalisation)})", ""]
        out += table(["function", "where", "A", "B", "change", "of the change"],
                     [[code(f.function), code(os.path.basename(f.file)), fmt_ns(f.a_ns), fmt_ns(f.b_ns),
                       ("+" if f.delta_ns >= 0 else "-") + fmt_ns(abs(f.delta_ns)), f"{100 * f.share:.0f}%"]
                      for f in d.functions], right={2, 3, 4, 5}) + [""]
    out += ["#### Environment changes (most likely causes first)", ""]
    if d.env:
        out += table(["kind", "what", "A", "B"],
                     [[text(c.kind), f"**{text(c.label)}**" if d.cause is not None and c.key == d.cause.key
                       else text(c.label), code(c.before), code(c.after)] for c in d.env]) + [""]
    else:
        out += ["Nothing recorded differs.", ""]
    if d.notes:
        out += [f"- {text(n)}" for n in d.notes] + [""]
    return "\n".join(out)
