"""The Python 3.11 tracing mechanism: the traced function keeps its object, its code gets probes.

Python 3.11 has no ``sys.monitoring``. Instead of wrapping a function (a new object, an extra frame),
stepscope compiles its source again with the body inside probe calls and assigns the result to the
function's ``__code__``; ``code.replace`` keeps names, line numbers, columns, locals and free variables,
so frames, tracebacks, ``inspect``, recursion depth and identity are those of the original. The body::

    def f(a, b):
        "doc"
        if __stepscope_compiling__():          # torch.compile is tracing: the original body, no probes
            __stepscope_compiled__(PROBE_ID)   # notes the call as "inside a compiled region"
            <body>
        else:
            PROBE.enter()                      # or PROBE.enter_as(a) for a method traced on a subclass
            try:
                <body, each ``yield x`` as ``PROBE.resume((yield PROBE.suspend(x)))``>
            except BaseException:
                PROBE.error()
                raise
            finally:
                PROBE.exit()

``PROBE`` is a constant of the code object (the ``Probe``); ``__stepscope_compiling__`` and
``__stepscope_compiled__`` are two names in ``builtins`` (``bool`` and ``id`` until torch.compile is
loaded; then ``torch.compiler.is_dynamo_compiling`` and a ``torch._dynamo.assume_constant_result`` function), so
Dynamo sees exactly the original body and adds no graph break. The probe calls' lines are marked as
having no location, so ``sys.settrace`` sees the original line events.

Limits (3.11 only): functions without source (built from strings, ``.pyc`` only) cannot be traced this
way; a program's own ``sys.setprofile``/``cProfile`` sees the probe calls; code objects pickled by value
(cloudpickle) carry the probes.
"""

from __future__ import annotations

import __future__ as _future
import ast
import builtins
import linecache
import types

from .precheck import inner_statements
from .probes import Probe

PLACEHOLDER = "\x00stepscope-probe-"
COMPILING = "__stepscope_compiling__"
COMPILED = "__stepscope_compiled__"
_FUTURE_MASK = 0
for _f in _future.all_feature_names:
    _FUTURE_MASK |= getattr(_future, _f).compiler_flag
_OUTER = "__stepscope_outer__"

_ast_cache: dict[str, tuple[object, ast.Module, list]] = {}  # file -> (key of its text, tree, linecache's lines)


class CannotInstrument(Exception):
    """The function's code cannot be instrumented (the message says why)."""


def install_builtins() -> None:
    """Define the two builtins the instrumented code calls (idempotent)."""
    if not hasattr(builtins, COMPILING):
        setattr(builtins, COMPILING, bool)
        setattr(builtins, COMPILED, id)


def dynamo_loaded(torch_compiler_is_compiling, compiled_note) -> None:
    """Switch the builtins to torch.compile's: called once ``torch._dynamo`` is imported."""
    setattr(builtins, COMPILING, torch_compiler_is_compiling)
    setattr(builtins, COMPILED, compiled_note)


def copy_ast(node):
    """A deep copy of a parsed tree (a node or a list of nodes), as ``copy.deepcopy`` makes it, about 4x
    faster (a large ``forward`` is copied three times per instrumenting: most of the time a traced name's
    import costs on 3.11): node classes made without ``__init__``, fields and locations from the node's
    ``__dict__``; leaves (strings, numbers, constants' values) shared, as immutable; nodes with no fields (the
    parser's shared ``Load``/``Store``/operator instances) shared too, as the parser shares them."""
    if isinstance(node, list):
        return [copy_ast(x) for x in node]
    if isinstance(node, ast.AST):
        if not node._fields:
            return node
        new = node.__class__.__new__(node.__class__)
        new.__dict__.update({k: copy_ast(v) for k, v in node.__dict__.items()})
        return new
    return node


def _module_ast(filename: str) -> ast.Module:
    lines = linecache.getlines(filename)
    if not lines:
        raise CannotInstrument(f"no source for {filename}")
    hit = _ast_cache.get(filename)
    if hit is not None and hit[2] is lines:  # linecache's same list: the same text (no key to compute)
        return hit[1]
    key = hash(tuple(lines)) if len(lines) < 50 else (len(lines), lines[0], lines[-1], sum(map(len, lines)))
    if hit is not None and hit[0] == key:
        _ast_cache[filename] = (key, hit[1], lines)
        return hit[1]
    tree = ast.parse("".join(lines), filename)
    _ast_cache[filename] = (key, tree, lines)
    return tree


def _find_def(tree: ast.AST, code: types.CodeType):
    """The ``def`` of ``code`` in its module's tree: from an index of the tree's defs by name and first line,
    made once per tree (a walk of a large module per traced function was most of the cost of tracing the ~20
    collectives of torch.distributed's 5,000-line distributed_c10d.py on 3.11)."""
    index = tree.__dict__.get("_stepscope_defs")
    if index is None:
        index = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                index.setdefault((node.name, first), node)  # the first in walk order, as before
        tree.__dict__["_stepscope_defs"] = index
    return index.get((code.co_name, code.co_firstlineno))


class _Yields(ast.NodeTransformer):
    """``yield x`` -> ``PROBE.resume((yield PROBE.suspend(x)))`` in the function's own scope."""

    def __init__(self, ph: str) -> None:
        self.ph = ph

    def visit_FunctionDef(self, node):
        return node  # a nested scope: its yields are its own

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_GeneratorExp(self, node):
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp

    def visit_Yield(self, node):
        self.generic_visit(node)
        value = node.value if node.value is not None else _marked(ast.Constant(None))
        inner = ast.Yield(_call(self.ph, "suspend", [value]))
        outer = _call(self.ph, "resume", [inner])
        for n in ast.walk(outer):  # the yield's own location: its line events and tracebacks stay
            if n is not value and getattr(n, "lineno", None) is None:
                ast.copy_location(n, node)
        return outer


def _call(ph: str, method: str, args: list) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Constant(ph), method, ast.Load()), args, [])


def has_own_yield(node) -> bool:
    """True when a ``def`` node's own body (not nested scopes) holds ``yield`` or ``yield from``."""
    todo = list(node.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return False


def transform_def(node, probe: Probe, first_arg: str | None) -> None:
    """Rewrite a ``def`` node's body in place to call ``probe`` (see the module docstring)."""
    ph = f"{PLACEHOLDER}{probe.id}"
    body = node.body
    doc = []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(
            body[0].value.value, str):
        doc, body = body[:1], body[1:]
    scope = _hoist_scope_statements(body)  # the body is compiled twice: one ``global``/``nonlocal`` at the top
    if not body:
        body = [_marked(ast.Pass())]
    plain = copy_ast(body)
    if has_own_yield(node):
        yields = _Yields(ph)
        body = [yields.visit(stmt) for stmt in body]
    if probe.loop is not None and probe.loop.loop is not None:  # a step loop: PROBE.loop_begin() / loop_end()
        _mark_loop(body, probe.loop.loop, ph)
    enter = _call(ph, "enter_as", [ast.Name(first_arg, ast.Load())]) if first_arg else _call(ph, "enter", [])
    instrumented = [
        ast.Expr(enter),
        ast.Try(body=body,
                handlers=[ast.ExceptHandler(ast.Name("BaseException", ast.Load()), None,
                                            [ast.Expr(_call(ph, "error", [])), ast.Raise()])],
                orelse=[], finalbody=[ast.Expr(_call(ph, "exit", []))]),
    ]
    test = ast.Call(ast.Name(COMPILING, ast.Load()), [], [])
    note = ast.Expr(ast.Call(ast.Name(COMPILED, ast.Load()), [ast.Constant(probe.id)], []))
    branch = ast.If(test, [note, *plain], instrumented)
    source = {id(n) for n in (*body, *plain)}  # the function's own statements: located, not walked
    todo = [branch]
    while todo:  # injected nodes: a marker line, made "no location" after compiling
        n = todo.pop()
        if id(n) in source:
            continue
        todo.extend(ast.iter_child_nodes(n))
        if "lineno" in getattr(n, "_attributes", ()) and getattr(n, "lineno", None) is None:
            n.lineno = n.end_lineno = _MARK
            n.col_offset = n.end_col_offset = 0
    branch.lineno = branch.end_lineno = _MARK
    for n in (instrumented[0], instrumented[1], note, test, enter):
        n.lineno = n.end_lineno = _MARK
    node.body = doc + scope + [branch]


def _mark_loop(stmts: list, spec, ph: str) -> bool:
    """Put ``PROBE.loop_begin()`` first in the body of the step loop (``spec``: ``steps.loops.LoopSpec``, found by
    its line and column in ``stmts``, the function's own statements) and ``PROBE.loop_end()`` right after it
    (lines marked ``_MARK``: no location). Whether it was found."""
    for k, n in enumerate(stmts):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(n, (ast.For, ast.While)) and n.lineno == spec.head and n.col_offset == spec.col:
            begin = ast.Expr(_call(ph, "loop_begin", []))
            end = ast.Expr(_call(ph, "loop_end", []))
            for m in (begin, end):
                for x in ast.walk(m):
                    if "lineno" in getattr(x, "_attributes", ()):
                        x.lineno = x.end_lineno = _MARK
                        x.col_offset = x.end_col_offset = 0
            n.body.insert(0, begin)
            stmts.insert(k + 1, end)
            return True
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(n, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt) and _mark_loop(inner, spec, ph):
                return True
        for h in getattr(n, "handlers", None) or ():
            if _mark_loop(h.body, spec, ph):
                return True
        for c in getattr(n, "cases", None) or ():
            if _mark_loop(c.body, spec, ph):
                return True
    return False


def _hoist_scope_statements(body: list) -> list:
    """Take the ``global`` and ``nonlocal`` statements of a function's own scope out of ``body`` (in place; one
    left alone in a block becomes ``pass``) and return them merged, one of each kind, to put before it.

    The instrumented body holds the original twice (the compiling branch and the probed one), and a name declared
    ``global`` in the second copy would be "used prior to global declaration" in the first (SyntaxError). A
    declaration holds for its whole scope wherever it stands, so one at the top means the same."""
    names: dict[type, list[str]] = {ast.Global: [], ast.Nonlocal: []}

    def strip(stmts: list) -> list:
        out = []
        for n in stmts:
            if isinstance(n, (ast.Global, ast.Nonlocal)):
                names[type(n)].extend(x for x in n.names if x not in names[type(n)])
                continue
            if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(n, field, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                        kept = strip(inner)
                        setattr(n, field, kept or [ast.copy_location(ast.Pass(), inner[0])])
                for h in getattr(n, "handlers", None) or ():
                    h.body = strip(h.body) or [ast.copy_location(ast.Pass(), h.body[0])]
                for c in getattr(n, "cases", None) or ():
                    c.body = strip(c.body) or [ast.copy_location(ast.Pass(), c.body[0])]
            out.append(n)
        return out

    body[:] = strip(body)
    hoisted = [kind(ns) for kind, ns in names.items() if ns]
    for n in hoisted:
        n.lineno = n.end_lineno = _MARK
        n.col_offset = n.end_col_offset = 0
    return hoisted


_MARK = 1 << 30  # line number of injected code before it is stripped of locations


def _marked(node):
    """An injected node inside the function's own statements (which ``transform_def`` does not walk) at the
    marker line."""
    node.lineno = node.end_lineno = _MARK
    node.col_offset = node.end_col_offset = 0
    return node


def instrument_function(fn: types.FunctionType, probe: Probe, first_arg: str | None) -> types.CodeType:
    """A code object for ``fn`` with ``probe`` calls (see the module docstring).

    Raises CannotInstrument when the source cannot be found or does not match the code.
    """
    code = fn.__code__
    try:
        tree = _module_ast(code.co_filename)
    except (SyntaxError, ValueError) as e:
        raise CannotInstrument(f"cannot parse {code.co_filename}: {e}") from None
    node = _find_def(tree, code)
    if node is None:
        raise CannotInstrument(f"no source for {code.co_qualname} in {code.co_filename}")
    imports = _module_imports(tree)
    original = _compile_def(node, code, imports)  # (reads the node: never changes it)
    if (original.co_code != code.co_code or original.co_consts != code.co_consts) and imports:
        # IPython compiles a cell's statements one at a time: a function defined there was compiled without the
        # cell's imports in view (3.11 then calls a module's functions as methods)
        original = _compile_def(node, code, [])
        imports = [] if original.co_code == code.co_code and original.co_consts == code.co_consts else imports
    if original.co_code != code.co_code or original.co_consts != code.co_consts:
        raise CannotInstrument(f"the source of {code.co_qualname} in {code.co_filename} changed since it was loaded")
    node = copy_ast(node)
    transform_def(node, probe, first_arg)
    new = _compile_def(node, code, imports)
    new = bind_probes(strip_marked_lines(new))
    for attr in ("co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_varnames", "co_cellvars",
                 "co_freevars"):
        if getattr(new, attr) != getattr(code, attr):
            raise CannotInstrument(f"{code.co_qualname}: {attr} differs after instrumenting")
    return new


def _module_imports(tree: ast.Module) -> list:
    """The module-scope ``import`` statements, also those under ``if``/``try``/``with`` (3.11 compiles
    calls on imported names differently, so the copy must see the same ones)."""
    cached = tree.__dict__.get("_stepscope_imports")
    if cached is not None:
        return cached
    out = []
    todo = list(tree.body)
    while todo:
        n = todo.pop(0)
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            if not (isinstance(n, ast.ImportFrom) and n.module == "__future__"):
                out.append(n)
        elif isinstance(n, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            todo.extend(inner_statements(n))
    tree.__dict__["_stepscope_imports"] = out
    return out


def _compile_def(node, code: types.CodeType, imports: list) -> types.CodeType:
    """Compile one ``def`` (never run) as it was compiled in its module: inside a class of the same name
    for a method, a function that binds its free variables, after the module's imports (3.11 compiles
    ``module.attr()`` of an imported module differently)."""
    qual = code.co_qualname.split(".")
    inner: list = [node]
    if len(qual) > 1 and qual[-2] != "<locals>":  # a method: compile in a class of that name (mangling,
        inner = [ast.ClassDef(qual[-2], [], [], inner, [])]  # __class__ for super())
    free = [v for v in code.co_freevars if v != "__class__"]
    prelude = [ast.Assign([ast.Name(v, ast.Store()) for v in free], ast.Constant(None))] if free else []
    if free:  # a closure: the free variables are bound by an enclosing function
        outer = ast.FunctionDef(_OUTER, ast.arguments([], [], None, [], [], None, []), prelude + inner, [], None)
        mod = ast.Module([*imports, outer], [])
    else:  # module level, so that names it reads stay globals (its own name too)
        mod = ast.Module([*imports, *inner], [])
    _fill_locations(mod, node.lineno, located=(node, *imports))
    try:
        top = compile(mod, code.co_filename, "exec", flags=code.co_flags & _FUTURE_MASK, dont_inherit=True)
    except (SyntaxError, ValueError) as e:  # (its module compiled: a form this rewrite does not handle)
        why = e.msg if isinstance(e, SyntaxError) else e
        raise CannotInstrument(f"{code.co_qualname}: cannot compile it with probes ({why})") from None
    found = _find_code(top, code.co_name, code.co_firstlineno)
    if found is None:
        raise CannotInstrument(f"{code.co_qualname}: instrumented code not found")
    return _requalify(found, code.co_qualname).replace(co_flags=code.co_flags)


def _fill_locations(tree: ast.AST, line: int, located: tuple = ()) -> None:
    """Locations for the nodes made here (at ``line``); the subtrees in ``located`` are not walked: the parsed
    imports and the ``def``, whose nodes all have theirs (parsed, or set by ``transform_def``)."""
    skip = {id(n) for n in located}
    todo = [tree]
    while todo:
        n = todo.pop()
        if id(n) in skip:
            continue
        todo.extend(ast.iter_child_nodes(n))
        if "lineno" in getattr(n, "_attributes", ()):
            if getattr(n, "lineno", None) is None:
                n.lineno = line
                n.col_offset = 0
            if getattr(n, "end_lineno", None) is None:
                n.end_lineno = n.lineno
                n.end_col_offset = n.col_offset


def _find_code(code: types.CodeType, name: str, firstlineno: int):
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == name and c.co_firstlineno == firstlineno:
                return c
            hit = _find_code(c, name, firstlineno)
            if hit is not None:
                return hit
    return None


def _requalify(code: types.CodeType, qualname: str) -> types.CodeType:
    """Give ``code`` the original qualname, and its nested code objects the matching prefix."""
    old_prefix = code.co_qualname + "."
    new_prefix = qualname + "."

    def fix(c: types.CodeType, q: str) -> types.CodeType:
        consts = tuple(fix(k, new_prefix + k.co_qualname[len(old_prefix):] if k.co_qualname.startswith(old_prefix)
                           else k.co_qualname) if isinstance(k, types.CodeType) else k for k in c.co_consts)
        return c.replace(co_qualname=q, co_consts=consts)

    return fix(code, qualname)


def bind_probes(code: types.CodeType) -> types.CodeType:
    """Replace the probe placeholder constants (in ``code`` and its nested code) with the probes."""
    from .probes import probe as lookup

    changed = False
    consts = []
    for k in code.co_consts:
        if isinstance(k, str) and k.startswith(PLACEHOLDER):
            k = lookup(int(k[len(PLACEHOLDER):]))
            if k is not None and k.native is not None:  # the C recorder's (``mechanism.native_probe``)
                k = k.native
            changed = True
        elif isinstance(k, types.CodeType):
            k2 = bind_probes(k)
            changed |= k2 is not k
            k = k2
        consts.append(k)
    return code.replace(co_consts=tuple(consts)) if changed else code


def strip_marked_lines(code: types.CodeType) -> types.CodeType:
    """Mark the instructions of injected code (line ``_MARK``) as having no location, in ``code`` and
    its nested code objects: no line events, no traceback lines. Location table format of CPython 3.11+
    (Objects/locations.md): entries of up to 8 code units; code 15 = no location, 14 = long form."""
    consts = tuple(strip_marked_lines(k) if isinstance(k, types.CodeType) else k for k in code.co_consts)
    positions = list(code.co_positions())
    if not any(p[0] == _MARK for p in positions):
        return code.replace(co_consts=consts) if consts != code.co_consts else code
    out = bytearray()
    line = code.co_firstlineno
    i = 0
    n = len(positions)
    while i < n:
        pos = positions[i]
        if pos[0] == _MARK:
            pos = (None, None, None, None)
        j = i + 1
        while j < n and j - i < 8 and _same(positions[j], pos):
            j += 1
        length = j - i
        if pos[0] is None:
            out.append(0x80 | (15 << 3) | (length - 1))
        else:
            start, end, col, end_col = pos
            out.append(0x80 | (14 << 3) | (length - 1))
            _svarint(out, start - line)
            _varint(out, (end if end is not None else start) - start)
            _varint(out, 0 if col is None else col + 1)
            _varint(out, 0 if end_col is None else end_col + 1)
            line = start
        i = j
    return code.replace(co_linetable=bytes(out), co_consts=consts)


def _same(p, q) -> bool:
    if p[0] == _MARK:
        p = (None, None, None, None)
    return p == q


def _varint(out: bytearray, v: int) -> None:
    while v >= 64:
        out.append(0x40 | (v & 63))
        v >>= 6
    out.append(v)


def _svarint(out: bytearray, v: int) -> None:
    _varint(out, (-v << 1) | 1 if v < 0 else v << 1)


def instrument_module(source: str, filename: str, defs: dict[str, tuple[Probe, str | None]], flags: int = 0):
    """Compile a whole module (the script run as ``__main__``) with the ``def``s whose qualname is in
    ``defs`` (qualname -> (probe, first argument name for a subclass filter)) instrumented.

    Raises SyntaxError as ``compile`` does.
    """
    tree = ast.parse(source, filename)
    for qual, node in iter_defs(tree):
        hit = defs.get(qual)
        if hit is not None:
            transform_def(node, hit[0], hit[1])
    code = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    return bind_probes(strip_marked_lines(code))


def iter_defs(tree: ast.Module):
    """``(qualname, def node)`` for every function defined in a module, outside other functions."""
    todo = [(n, "") for n in tree.body]
    while todo:
        node, prefix = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            todo.extend((n, f"{prefix}{node.name}.") for n in node.body)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for n in getattr(node, field, ()) or ():
                    if isinstance(n, ast.ExceptHandler):
                        todo.extend((m, prefix) for m in n.body)
                    else:
                        todo.append((n, prefix))
