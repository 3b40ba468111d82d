"""Span names from a call's arguments (``labels`` in ``traces.toml``, ``--label NAME=TEMPLATE``, app presets).

A template is text with fields in braces, each a small expression over the traced function's arguments:
names (the function's parameters), attribute access (``node.type``), item access with a constant or a
parameter as the key (``prompt[node_id]['class_type']``), and ``a or b`` (the first that can be read and is
not None or empty). For example, ComfyUI's ``execution.execute``::

    "{dynprompt.original_prompt[current_item]['class_type']} #{current_item}"

Nothing else is allowed (no calls, no operators): ``compile_label`` raises ValueError naming the template. A
field is read when the call starts, from the frame's locals; a field that cannot be read (a missing key, an
attribute that raises) reads ``?``, and when every field is ``?`` the span keeps the function's name. Reading
never raises into the program. Attribute access runs properties, as any read of them does.
"""

from __future__ import annotations

import ast
import string

#: The key of the hooks' attrs that renames the span (taken out by ``tracing.probes``).
NAME_KEY = "stepscope.name"
#: Longest label kept (characters); the rest is cut.
MAX_LABEL = 200

_MISSING = object()


def _compile_expr(node, where: str):
    """A function ``locals -> value`` (``_MISSING`` when it cannot be read) for an allowed expression node."""
    if isinstance(node, ast.Name):
        key = node.id
        return lambda loc: loc.get(key, _MISSING)
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)):
        v = node.value
        return lambda loc: v
    if isinstance(node, ast.Attribute):
        inner, attr = _compile_expr(node.value, where), node.attr

        def get_attr(loc):
            obj = inner(loc)
            if obj is _MISSING:
                return _MISSING
            try:
                return getattr(obj, attr)
            except Exception:
                return _MISSING
        return get_attr
    if isinstance(node, ast.Subscript):
        inner, key = _compile_expr(node.value, where), _compile_expr(node.slice, where)
        if not isinstance(node.slice, (ast.Constant, ast.Name)):
            raise ValueError(f"{where}: an item key must be a constant or a parameter name")

        def get_item(loc):
            obj, k = inner(loc), key(loc)
            if obj is _MISSING or k is _MISSING:
                return _MISSING
            try:
                return obj[k]
            except Exception:
                return _MISSING
        return get_item
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        parts = [_compile_expr(v, where) for v in node.values]

        def first(loc):
            for p in parts:
                v = p(loc)
                if v is not _MISSING and v is not None and v != "":
                    return v
            return _MISSING
        return first
    raise ValueError(f"{where}: only names, .attribute, [key] and `or` are allowed (got {type(node).__name__})")


def compile_label(template: str, where: str = "label"):
    """A function ``locals (dict) -> str | None`` for ``template`` (None: no field could be read). Raises
    ValueError (one line naming ``where``) for a template it cannot read."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    pieces: list = []
    fields = 0
    for text, field, spec, conv in parts:
        if text:
            pieces.append(text)
        if field is None:
            continue
        if spec or conv:
            raise ValueError(f"{where}: no format spec or conversion in a field ({{{field}}})")
        try:
            tree = ast.parse(field.strip(), mode="eval")
        except SyntaxError:
            raise ValueError(f"{where}: cannot read the field {{{field}}}") from None
        pieces.append(_compile_expr(tree.body, where))
        fields += 1
    if not fields:
        raise ValueError(f"{where}: no field in braces (e.g. {{node.type}})")

    def render(loc) -> str | None:
        out = []
        read = 0
        for p in pieces:
            if p.__class__ is str:
                out.append(p)
                continue
            try:
                v = p(loc)
            except Exception:
                v = _MISSING
            if v is _MISSING:
                out.append("?")
            else:
                read += 1
                try:
                    out.append(v if v.__class__ is str else str(v))
                except Exception:
                    out.append("?")
        return "".join(out)[:MAX_LABEL] if read else None
    return render


class Label:
    """Hooks (``tracing.probes``) that name a traced call's span from its arguments: ``enter_frame`` returns
    ``{NAME_KEY: label}`` merged into the attrs of ``inner`` (other hooks: a step rule's, or None), or only those
    when nothing could be read. ``template``: a label template, or ``facts``: a function ``locals -> (name | None,
    attrs | None)`` (an app preset's, ``apps``); ``op``: the spans' op (default: ``inner``'s, else "function")."""

    __slots__ = ("render", "template", "inner", "op", "facts")

    def __init__(self, template: str | None = None, inner=None, where: str = "label", facts=None,
                 op: str | None = None) -> None:
        self.render = compile_label(template, where) if template is not None else None
        self.template = template
        self.facts = facts
        self.inner = inner
        self.op = op or getattr(inner, "op", "function")

    def enter(self, args: tuple, kwargs: dict):
        return self.inner.enter(args, kwargs) if self.inner is not None else None

    def enter_frame(self, frame):
        attrs = self.inner.enter_frame(frame) if self.inner is not None else None
        name, more = None, None
        try:
            loc = frame.f_locals
            if self.facts is not None:
                name, more = self.facts(loc)
            else:
                name = self.render(loc)
        except Exception:  # never into the program
            pass
        if name is None and not more:
            return attrs
        out = dict(attrs) if attrs else {}
        if more:
            out.update(more)
        if isinstance(name, str):
            out[NAME_KEY] = name[:MAX_LABEL]
        return out

    def exit(self) -> None:
        if self.inner is not None:
            self.inner.exit()


def parse_labels(items, where: str = "--label") -> dict[str, str]:
    """``NAME=TEMPLATE`` strings (or a mapping) -> {name: template}, each template checked. Raises ValueError."""
    out: dict[str, str] = {}
    pairs = items.items() if isinstance(items, dict) else [(*str(x).split("=", 1),) for x in items]
    for pair in pairs:
        if len(pair) != 2 or not str(pair[0]).strip():
            raise ValueError(f"{where}: expected NAME=TEMPLATE, got {'='.join(map(str, pair))!r}")
        name, template = str(pair[0]).strip(), pair[1]
        if not isinstance(template, str):
            raise ValueError(f"{where}: {name}: the template must be text")
        compile_label(template, f"{where} {name}")
        out[name] = template
    return out
