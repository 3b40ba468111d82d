"""IPython magics: ``%load_ext stepscope``, then

- ``%%stepscope [--trace NAME ...] [--hz N] [--device-trace] [--app APP] [--step NAME] [--name LABEL] [--store DIR]
  [--no-report]``: the cell runs in the kernel's own process, recorded as a stepscope run (``notebook.handle.profile``);
  the run is displayed (the first screen, and the interactive report inline) and kept in the store;
- ``%stepscope_diff [A] [B] [--span NAME] [--name LABEL]``: the last two runs of a cell (by default the last cell
  profiled; when it ran once, the last two cells profiled in this kernel), or runs A (before) and B (after),
  compared as ``stepscope diff`` compares them.

The cell runs through the shell's own ``run_cell`` (as ``%%capture`` does): its output, its value and, when it
raises, its traceback are shown as IPython shows them without the magic. A raising cell keeps its run (status
"error"); the exception then leaves the magic again, marked so that IPython shows one line for it (the run's id)
instead of a second traceback, and the cell fails as it would have (a "Run All" stops there).

A cell is known by ``--name``, else by the notebook's cell id (sent by JupyterLab, VS Code and nbclient with each
execution), else by a hash of its text: its runs are stored with the command ``%%stepscope LABEL [NOTEBOOK]``, so
that ``stepscope runs`` lists them and ``stepscope diff`` pairs runs of the same cell.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
from pathlib import Path

from .handle import CELL_COMMAND


class _Args:
    """The parsed options of a magic line (``parse``)."""

    def __init__(self, **kw) -> None:
        self.__dict__.update(kw)


def _parser(prog: str, cell: bool):
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):  # (no SystemExit inside a kernel: one UsageError line instead)
            from IPython.core.error import UsageError

            raise UsageError(f"{prog}: {message}")

    p = Parser(prog=prog, add_help=False)
    if cell:
        p.add_argument("--trace", "-t", action="append", default=[], metavar="NAME",
                       help="qualified name to trace as a span (repeat it, or separate names with commas)")
        p.add_argument("--hz", type=float, default=None, help="samples per second per thread (0: none)")
        p.add_argument("--device-trace", action="store_true", help="record the device timeline too")
        p.add_argument("--app", default=None, help="an app's preset (comfyui, a1111, invokeai...)")
        p.add_argument("--step", action="append", default=[], metavar="NAME", help="a function whose calls are steps")
        p.add_argument("--no-report", action="store_true", help="the first screen only, without the inline report")
    else:
        p.add_argument("runs", nargs="*", help="run A (before) and B (after); default: the cell's last two runs")
        p.add_argument("--span", default=None, help="the span name to compare per call")
    p.add_argument("--name", default=None, help="the cell's label (default: the notebook's cell id)")
    p.add_argument("--store", default=None, help="the store folder (default $STEPSCOPE_STORE or ./.stepscope)")
    return p


def parse(line: str, cell: bool) -> _Args:
    """The options of a ``%%stepscope`` (``cell``) or ``%stepscope_diff`` line. Raises UsageError (one line)."""
    from IPython.core.error import UsageError

    try:
        words = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"%%stepscope: {e}") from None
    ns = _parser("%%stepscope" if cell else "%stepscope_diff", cell).parse_args(words)
    return _Args(**vars(ns))


def cell_label(shell, cell: str, name: str | None, cell_id: str | None = None) -> str:
    """What the cell's runs are called: ``name``, else ``cell <id>`` from the execution request (``cell_id``: IPython's
    ``ExecutionInfo.cell_id``, which ipykernel takes from the request's ``cellId``: JupyterLab, Notebook 7, VS Code,
    nbclient), else ``cell <hash of its text>``."""
    if name:
        return name
    cid = cell_id
    if not cid:
        parent = getattr(shell, "parent_header", None) or {}
        cid = (parent.get("metadata") or {}).get("cellId") if isinstance(parent, dict) else None
    if cid:
        return f"cell {str(cid)[:12]}"
    return f"cell {hashlib.sha1(cell.strip().encode()).hexdigest()[:8]}"


def notebook_path(shell) -> str | None:
    """The notebook's file, where the front end says it (Jupyter Server's ``JPY_SESSION_NAME``, VS Code's
    ``__vsc_ipynb_file__``), else None."""
    ns = getattr(shell, "user_ns", {}) or {}
    path = ns.get("__vsc_ipynb_file__") or os.environ.get("JPY_SESSION_NAME")
    return str(path) if path else None


def _names(values: list[str]) -> list[str]:
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


class StepscopeMagics:
    """The magics' state in one kernel: the label of the last cell profiled (``%stepscope_diff``'s default) and its
    store. Registered by ``load_ipython_extension``."""

    def __init__(self, shell) -> None:
        self.shell = shell
        self.last_label: str | None = None
        self.last_store: str | None = None
        self.history: list[tuple[str, str, str]] = []  # (label, run id, store) of each %%stepscope in this kernel
        self.running = False
        self.cell_id: str | None = None  # the cell being run (``pre_run_cell``)

    def pre_run_cell(self, info) -> None:
        """IPython's ``pre_run_cell`` event: note the cell's id (not that of the cell run inside a ``%%stepscope``)."""
        if not self.running:
            self.cell_id = getattr(info, "cell_id", None)

    # -- %%stepscope ---------------------------------------------------------------------------------------------
    def cell_magic(self, line: str, cell: str):
        from IPython.core.error import UsageError
        from IPython.display import display

        from ..record import api
        from .handle import profile

        args = parse(line, cell=True)
        if self.running or api.current_session() is not None:
            s = api.current_session()
            raise UsageError("%%stepscope: stepscope is already recording" + (f" run {s.run_id}" if s else "")
                             + " in this kernel: one %%stepscope cell at a time (a stepscope.init() session ends "
                             "with stepscope.shutdown())")
        label = cell_label(self.shell, cell, args.name, self.cell_id)
        nb = notebook_path(self.shell)
        try:
            prof = profile(_names(args.trace), hz=args.hz, device_trace=args.device_trace, app=args.app,
                           steps=_names(args.step), store=args.store,
                           label=[CELL_COMMAND, label] + ([nb] if nb else []))
        except ValueError as e:
            raise UsageError(f"%%stepscope: {e}") from None
        self.running = True
        try:
            try:
                run = prof.__enter__()
            except Exception as e:  # (a store that cannot be opened: one line, the cell not run)
                raise UsageError(f"%%stepscope: {e}") from None
            failure = None
            definitions = _Definitions()
            self.shell.ast_transformers.append(definitions)
            try:
                result = self.shell.run_cell(cell, store_history=False)
                failure = result.error_before_exec or result.error_in_exec
            finally:
                with contextlib.suppress(ValueError):
                    self.shell.ast_transformers.remove(definitions)
                if failure is not None:
                    prof.__exit__(type(failure), failure, failure.__traceback__)
                else:
                    prof.__exit__(None, None, None)
        finally:
            self.running = False
        self.last_label, self.last_store = label, str(run.store)
        self.history.append((label, run.run_id, str(run.store)))
        run.show_report = not args.no_report
        display(run)
        if failure is not None:
            _fail_quietly(self.shell, failure, f"stepscope: the cell raised {type(failure).__name__}; its run "
                          f"{run.run_id} is kept (status error)")

    # -- %stepscope_diff -----------------------------------------------------------------------------------------
    def diff_magic(self, line: str):
        from IPython.core.error import UsageError
        from IPython.display import display

        from ..store.db import Store, StoreError
        from .handle import diff_view

        args = parse(line, cell=False)
        if len(args.runs) > 2:
            raise UsageError("%stepscope_diff: at most two runs (A, before; B, after)")
        try:
            store = Store(args.store or self.last_store)
        except (StoreError, OSError) as e:
            raise UsageError(f"%stepscope_diff: {e}") from None
        refs = list(args.runs)
        if not refs:
            label = args.name or self.last_label
            if label is None:
                raise UsageError("%stepscope_diff: no %%stepscope cell has run in this kernel: name the runs "
                                 "(%stepscope_diff A B) or the cell (--name LABEL)")
            ids = cell_runs(store, label)
            if len(ids) >= 2:
                refs = [ids[1], ids[0]]
            else:  # the cell ran once: the last two cells profiled in this kernel (the same code in two cells)
                mine = [rid for _lbl, rid, st in self.history if Path(st) == Path(store.path)]
                if args.name is not None or len(mine) < 2:
                    raise UsageError(f"%stepscope_diff: {label} has {len(ids)} run{'s' if len(ids) != 1 else ''} in "
                                     f"{store.path}: run the cell again to compare two")
                refs = mine[-2:]
        elif len(refs) == 1:
            refs = [refs[0], "last"]
        try:
            shown = diff_view(store, refs[0], refs[1], args.span)
        except (ValueError, StoreError) as e:
            raise UsageError(f"%stepscope_diff: {e}") from None
        display(shown)


class _Definitions:
    """An IPython AST transformer (``shell.ast_transformers``, while a ``%%stepscope`` cell runs): after each top-level
    ``def`` and ``class`` of the cell, a call of ``defined()``, so that a traced ``__main__.NAME`` that the cell itself
    defines is traced from its definition on (``stepscope run`` compiles a script's traced functions with their probes;
    a cell's statements are compiled one at a time by IPython, so they are traced as they are made)."""

    def visit(self, tree):
        import ast

        if not isinstance(tree, ast.Module):
            return tree
        body = []
        for node in tree.body:
            body.append(node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                call = ast.parse(f"__import__({__name__!r}, fromlist=['defined']).defined()").body[0]
                for n in ast.walk(call):  # (on the definition's last line: tracebacks and samples show the cell's)
                    if hasattr(n, "lineno"):
                        n.lineno = n.end_lineno = node.end_lineno or node.lineno
                        n.col_offset = n.end_col_offset = 0
                body.append(call)
        tree.body = body
        return tree


def defined() -> None:
    """A ``%%stepscope`` cell just defined a function or class: the traced ``__main__`` names still waiting for their
    definition are looked for again (``tracing.patch.Patcher.on_import``). Never raises."""
    from ..record import api

    s = api.current_session()
    if s is not None:
        with contextlib.suppress(Exception):
            s.patcher.on_import("__main__")


def cell_runs(store, label: str, limit: int = 200) -> list[str]:
    """The ids of the runs of the cell ``label`` in ``store`` (``store.db.Store``), newest first."""
    return [r.id for r in store.list_runs(limit=limit)
            if len(r.command) >= 2 and r.command[0] == CELL_COMMAND and r.command[1] == label]


def _fail_quietly(shell, exc: BaseException, line: str) -> None:
    """Raise ``exc`` again so that the cell fails as it would have, shown as the one ``line`` (IPython renders an
    exception through its ``_render_traceback_``: the traceback itself was shown already). The mark is taken off the
    exception once the cell is over."""
    try:
        exc._render_traceback_ = lambda: [line]
    except (AttributeError, TypeError):  # (an exception type without a __dict__: its traceback is shown again)
        raise exc

    def unmark(*_a) -> None:
        try:
            del exc._render_traceback_
        except AttributeError:
            pass
        try:
            shell.events.unregister("post_run_cell", unmark)
        except ValueError:
            pass

    shell.events.register("post_run_cell", unmark)
    raise exc


def load_ipython_extension(ipython) -> None:
    """``%load_ext stepscope``: register ``%%stepscope`` and ``%stepscope_diff`` on ``ipython``."""
    m = StepscopeMagics(ipython)
    ipython.register_magic_function(m.cell_magic, magic_kind="cell", magic_name="stepscope")
    ipython.register_magic_function(m.diff_magic, magic_kind="line", magic_name="stepscope_diff")
    ipython.events.register("pre_run_cell", m.pre_run_cell)
    ipython._stepscope_magics = m
