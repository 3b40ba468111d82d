"""The house's boundaries, checked from the source (ast only; nothing is imported):

- ``stepscope.record`` (everything that runs inside the profiled program) imports, at module level, only the
  standard library, itself, ``stepscope.core``'s stdlib modules and the store's writing side; inside functions it may
  also import the program's own torch / torch_xla (looked up once the program has them);
- what ``record`` reaches through those imports is stdlib only (the closure), so a program without numpy records;
- no import circle between modules at module level, and no loop between folders (packages);
- no file over 600 lines.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PKG = SRC / "stepscope"
STDLIB = sys.stdlib_module_names
#: what the recorder may import from the rest of stepscope (stdlib-only modules, checked by the closure test)
RECORD_MAY_IMPORT = ("stepscope.record", "stepscope.core.model", "stepscope.core.clock", "stepscope.core.units",
                     "stepscope.core.limits", "stepscope.core.jsondepth", "stepscope.core.procs",
                     "stepscope.core.steprules", "stepscope.store.db", "stepscope.store.schema",
                     "stepscope.store.spanblock", "stepscope.store.sampleblock", "stepscope.store")
#: the program's own libraries, imported by the recorder lazily (inside a function) once the program has them
PROGRAM_LIBS = ("torch", "torch_xla")


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(mod: str, path: Path) -> list[tuple[str, bool, int]]:
    """(absolute module imported, at module level?, line) for each import in the file; ``from pkg import name``
    counts as ``pkg.name`` when that is a module."""
    tree = ast.parse(path.read_text())
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    top = {id(n) for n in tree.body}
    for n in tree.body:  # module-level try/if blocks run at import too; ``if TYPE_CHECKING:`` never runs
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            top.discard(id(n))
            n._typing_only = True
        elif isinstance(n, (ast.Try, ast.If)):
            top |= {id(x) for x in ast.walk(n)}
    typing_only = {id(x) for n in tree.body if getattr(n, "_typing_only", False) for x in ast.walk(n)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module
            if node.module and node.module == "__future__":
                continue
            for a in node.names:
                full = f"{src}.{a.name}"
                out.append((full if full in MODULES else src, id(node) in top, node.lineno))
    return out


IMPORTS = {m: _imports(m, p) for m, p in MODULES.items()}


def _is_std(name: str) -> bool:
    return name.split(".")[0] in STDLIB


def test_record_imports_only_the_stdlib_and_itself_at_module_level():
    bad = []
    for mod, imps in IMPORTS.items():
        if not mod.startswith("stepscope.record"):
            continue
        for name, at_top, line in imps:
            if _is_std(name) or name == "stepscope" or name.startswith(RECORD_MAY_IMPORT):
                continue
            if not at_top and name.split(".")[0] in PROGRAM_LIBS:
                continue
            bad.append(f"{MODULES[mod].relative_to(SRC)}:{line}: {name}")
    assert not bad, "\n".join(bad)


def test_what_record_reaches_is_stdlib_only():
    seen, todo, bad = set(), [m for m in MODULES if m.startswith("stepscope.record")], []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        for name, at_top, line in IMPORTS[mod]:
            if not at_top:
                continue
            if name.startswith("stepscope"):
                target = name
                while target not in MODULES:  # pkg.attr -> pkg
                    target = target.rsplit(".", 1)[0]
                todo.append(target)
                if target.count(".") > 1:  # the package __init__ runs too
                    todo.append(target.rsplit(".", 1)[0])
            elif not _is_std(name):
                bad.append(f"{MODULES[mod].relative_to(SRC)}:{line}: {name}")
    assert not bad, "\n".join(bad)


def _top_graph(level, lazy: bool = False) -> dict[str, set[str]]:
    """Module (or folder, by ``level``) -> what it imports: at module level, or anywhere with ``lazy``."""
    g = defaultdict(set)
    for mod, imps in IMPORTS.items():
        for name, at_top, _ in imps:
            if (at_top or lazy) and name.startswith("stepscope.") and name in MODULES and name != mod:
                a, b = level(mod), level(name)
                if a != b:
                    g[a].add(b)
    return g


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_modules():
    """Not even through an import inside a function (one that runs later is still a tie both ways)."""
    assert _cycles(_top_graph(lambda m: m, lazy=True)) == []


def test_no_loop_between_folders():
    def folder(m):
        p = MODULES[m]
        return ".".join(p.relative_to(SRC).parent.parts)

    assert _cycles(_top_graph(folder)) == []


def test_no_file_over_600_lines():
    long = {str(p.relative_to(SRC)): n for p in PKG.rglob("*") if p.suffix in (".py", ".c", ".h", ".js")
            and (n := len(p.read_text().splitlines())) > 600}
    assert long == {}
