"""Names that cannot be traced, found before the program starts, without importing anything.

``stepscope run`` checks each name against the source on disk: it finds the top-level package with
``importlib.util.find_spec`` (which imports nothing for a top-level name), walks submodules as files, and
parses the module (``ast``) to see whether the rest of the name is defined there. Only certain misses are
reported: a module that is found but does not define the name, no ``__getattr__``, no ``import *``, and
the name appearing nowhere in its source (so lazy re-exports, which name it in a string, pass); a
method missing from a class whose bases are all known to lack it is not claimed (it may be inherited).
A glob's first part after the module is checked the same way: nothing the module binds (and, for a
package, no submodule file or folder) matches it. Everything else is left to the run itself, which
reports what it could not trace at the end (a glob with what it saw there).
"""

from __future__ import annotations

import ast
import difflib
import fnmatch
import importlib.util
import os
import re
import sys

_GLOB = set("*?[")



def inner_statements(n: ast.AST) -> list:
    """The statements nested in a block statement (``if``/``try``/``with``/``for``/``while``): its ``body``, ``orelse``,
    ``finalbody`` and exception handlers' bodies, in that order."""
    out = []
    for field in ("body", "orelse", "finalbody"):
        out.extend(getattr(n, field, ()) or ())
    for h in getattr(n, "handlers", ()) or ():
        out.extend(h.body)
    return out

def check(names: list[str], extra_path: list[str] | None = None) -> dict[str, str]:
    """Name -> why it cannot be traced, for the names certain to fail. ``extra_path``: folders searched
    first for top-level modules (the script's folder, as the program's ``sys.path[0]``). Never raises."""
    out: dict[str, str] = {}
    for name in names:
        try:
            why = _check(name, extra_path or [])
        except Exception:  # a check must never stop the run
            why = None
        if why:
            out[name] = why
    return out


def _top_origin(top: str, extra_path: list[str]) -> tuple[str | None, list[str] | None]:
    for folder in extra_path:
        pkg = os.path.join(folder, top, "__init__.py")
        if os.path.isfile(pkg):
            return pkg, [os.path.join(folder, top)]
        mod = os.path.join(folder, top + ".py")
        if os.path.isfile(mod):
            return mod, None
    if top in sys.builtin_module_names:
        return None, None
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        return None, None
    return spec.origin, list(spec.submodule_search_locations or []) or None


def _check(name: str, extra_path: list[str]) -> str | None:
    parts = name.split(".")
    if parts[0] == "__main__" or _GLOB & set(parts[0]):
        return None
    origin, search = _top_origin(parts[0], extra_path)
    i = 1
    path = parts[0]
    while search and i < len(parts) and not (_GLOB & set(parts[i])):  # submodules, as files
        sub = parts[i]
        pkg = next((os.path.join(d, sub) for d in search if os.path.isfile(os.path.join(d, sub, "__init__.py"))), None)
        mod = next((os.path.join(d, sub + ".py") for d in search if os.path.isfile(os.path.join(d, sub + ".py"))), None)
        if pkg:
            origin, search = os.path.join(pkg, "__init__.py"), [pkg]
        elif mod:
            origin, search = mod, None
        else:
            break
        path += "." + sub
        i += 1
    if origin is None or not origin.endswith(".py") or i >= len(parts):
        return None
    try:
        with open(origin, "rb") as f:
            source = f.read()
        tree = ast.parse(source, origin)
    except (OSError, SyntaxError, ValueError):
        return None
    return _in_module(tree, source, path, parts[i:], search)


def _defined(body) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    todo = list(body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[n.name] = n
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                for x in ast.walk(t):
                    if isinstance(x, ast.Name):
                        names[x.id] = n
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                names[(a.asname or a.name).split(".")[0]] = n
        elif isinstance(n, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            todo.extend(inner_statements(n))
    return names


def _submodules(search: list[str] | None) -> set[str]:
    """The names a package's folders could import as submodules (files and folders, whatever their kind)."""
    out: set[str] = set()
    for d in search or ():
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for e in entries:
            if e.startswith((".", "__")):
                continue
            out.add(e.partition(".")[0])
    return out


def _in_module(tree: ast.Module, source: bytes, path: str, rest: list[str],
               search: list[str] | None = None) -> str | None:
    head = rest[0]
    names = _defined(tree.body)
    if "__getattr__" in names or any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
                                     for n in ast.walk(tree)):
        return None
    if _GLOB & set(head):
        there = set(names) | _submodules(search)
        if any(fnmatch.fnmatchcase(n, head) for n in there):
            return None
        shown = sorted(n for n in there if not n.startswith("_"))
        listing = f" (it has {', '.join(shown[:6])}{', ...' if len(shown) > 6 else ''})" if shown else ""
        return (f"no functions match {'.'.join(rest)!r} in {path}: nothing in {path} matches {head!r}"
                + listing)
    node = names.get(head)
    if node is None:
        if re.search(rb"(?<![A-Za-z0-9_])" + re.escape(head.encode()) + rb"(?![A-Za-z0-9_])", source):
            # named somewhere (a lazy re-export's string, say): not certain
            return None
        return f"{path} has no attribute {head!r}" + _suggest(head, names, path + ".", rest[1:])
    if len(rest) < 2 or not isinstance(node, ast.ClassDef) or _GLOB & set(rest[1]):
        return None
    members = _defined(node.body)
    if rest[1] in members or node.bases or node.keywords:  # may be inherited
        return None
    return f"{path}.{head} has no attribute {rest[1]!r}" + _suggest(rest[1], members, head + ".", rest[2:])


def _suggest(attr: str, names, prefix: str, rest: list[str]) -> str:
    close = difflib.get_close_matches(attr, sorted(names), n=3, cutoff=0.6)
    suffix = "".join("." + r for r in rest)
    return ("; did you mean " + " or ".join(prefix + c + suffix for c in close) + "?") if close else ""
