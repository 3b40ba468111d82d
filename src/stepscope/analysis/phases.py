"""A run's phases: start-up, the traced work, shutdown.

Start-up is everything before the first traced call (imports of diffusers/transformers, building the
model): in a short run it is half the samples and hides the work. The *work* runs from the first span
that is not the run's root transaction (``stepscope run`` opens one around the whole program) to the end
of the last one; a traced ``__main__`` function around all the others (the script's ``main()``) is the
work's frame, not its start: the work starts at the first call inside it. An ingested run's transaction
is the program's own unit of work, so it is the work. With no span but the root transaction nothing is
split by spans. Then a well-known entry point on the sampled stacks marks the work without being named
(``WORK_ENTRIES``: a diffusers pipeline's ``__call__``, a transformers pipeline or ``generate``, an
``nn.Module`` call, a backward pass, an optimizer step): the work runs from the first sample inside one to
the last (``Phases.entry`` names the first). Shutdown is what follows the work (interpreter exit, atexit
handlers).

A sample that is importing a module (``IMPORT_FUNCS`` on its stack) is start-up wherever it falls, also
in a run with no work window: a lazy import inside the work is start-up work, not the work's.

A window recorded by ``stepscope capture`` (the run's ``Run.meta.capture``) has no start-up and
no shutdown: the program was running before it opened and goes on after it closed. The same windows are
named for what they are there (``Phases.capture``): the time before the first traced call is the app idle
or serving (``BEFORE_CAPTURE``), the time after the last one too.

Views (summary, flame graph, explain) show the work by default, start-up as one labelled block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.model import RunData
from ..core.spantable import NO_PARENT, as_table

STARTUP, WORK, SHUTDOWN = 0, 1, 2
NAMES = ("start-up", "work", "shutdown")
#: what the time around the work is in a capture window (``Phases.capture``), in words
BEFORE_CAPTURE = "the app idle or serving"


def is_capture(run) -> bool:
    """Whether ``run`` is a window recorded by ``stepscope capture`` (``Run.meta.capture``)."""
    return run.meta.capture is not None


@dataclass(slots=True)
class Phases:
    """The phase windows on the run's clock (ns). ``split``: False when no work window could be told
    apart (then ``work`` is the whole run, importing samples still start-up). ``entry``: the well-known entry
    point (``WORK_ENTRIES``) whose samples set the work window when no span did, else None. ``capture``: a
    window of ``stepscope capture`` (``is_capture``): what precedes the work is the app idle or serving, not
    start-up, and what follows it is not shutdown. Durations:
    ``startup_ns``, ``work_ns``, ``shutdown_ns``; ``startup_sampled_ns``/``shutdown_sampled_ns``: sampled time
    (busy samples) in them (start-up's includes the imports inside the work window)."""

    run_start_ns: int
    work_start_ns: int
    work_end_ns: int
    run_end_ns: int
    split: bool
    startup_sampled_ns: float = 0.0
    shutdown_sampled_ns: float = 0.0
    entry: str | None = None
    capture: bool = False

    @property
    def startup_ns(self) -> int:
        return self.work_start_ns - self.run_start_ns

    @property
    def work_ns(self) -> int:
        return self.work_end_ns - self.work_start_ns

    @property
    def shutdown_ns(self) -> int:
        return self.run_end_ns - self.work_end_ns


def _first(t, rows: np.ndarray) -> int:
    """Of ``rows`` of a SpanTable, the one that starts first (the longest among those, then table order)."""
    st = t.start[rows]
    rows = rows[st == st.min()]  # (one pass: no sort of every row)
    return int(rows[np.lexsort((rows, -t.end[rows]))[0]])


def _root_transaction(spans) -> int | None:
    """The id of a transaction that encloses every other span and starts first (the run's root)."""
    t = as_table(spans)
    if not len(t):
        return None
    first = _first(t, np.arange(len(t)))
    if t.ops[t.op[first]] != "transaction" or t.parent[first] != NO_PARENT:
        return None
    return int(t.id[first]) if t.end[first] >= t.end.max() else None


def phases(data: RunData, index=None) -> Phases:
    """The phases of a run (module doc); with ``index`` (a ProfileIndex) the sampled time of start-up
    and shutdown is filled in. Computed on the span columns (``stepscope.core.spantable``)."""
    run = data.run
    t = as_table(data.spans)
    t_first = [int(t.start.min())] if len(t) else []
    t_last = [int(t.end.max())] if len(t) else []
    if index is not None and len(index):
        t_first.append(int(index.t[0]))
        t_last.append(int(index.t[-1]))
    r0 = run.start_ns if run.start_ns else min(t_first, default=0)
    r1 = max([run.end_ns or 0] + t_last)
    # an ingested run's transaction is the program's own unit of work, not stepscope's frame around it
    root = None if run.env.get("source") == "sentry" else _root_transaction(t)
    work = np.flatnonzero(t.id != root) if root is not None else np.arange(len(t))
    if not len(work):
        ph = _entry_phases(index, r0, r1) if index is not None and len(index) else None
        ph = ph or Phases(r0, r0, r1, r1, False)
        ph.capture = is_capture(run)
        _sampled(index, ph)
        return ph
    w0 = int(t.start[work].min())
    w1 = int(t.end[work].max())
    outer = _first(t, work)
    if t.names[t.name[outer]].startswith("__main__.") and len(work) > 1 and t.end[outer] >= w1:
        w0 = int(t.start[work[work != outer]].min())  # the script's main(): its work starts at the first call it makes
    ph = Phases(r0, max(w0, r0), min(max(w1, w0), r1), r1, w0 > r0 or w1 < r1, capture=is_capture(run))
    _sampled(index, ph)
    return ph


def _sampled(index, ph: Phases) -> None:
    """Fill in the sampled time of start-up and shutdown (busy samples)."""
    if index is not None and len(index):
        busy = ~index.idle
        phase = sample_phase(index, ph)
        ph.startup_sampled_ns = float(index.weight[(phase == STARTUP) & busy].sum())
        ph.shutdown_sampled_ns = float(index.weight[(phase == SHUTDOWN) & busy].sum())


#: Well-known entry points of the work: a sample with one on its stack (and not importing) is the work's, in
#: a run where no traced span tells the work apart. ``(module prefix, qualname suffix)`` of the function.
WORK_ENTRIES = (
    ("diffusers.pipelines.", ".__call__"),                      # a diffusers pipeline call
    ("transformers.pipelines.", "Pipeline.__call__"),           # a transformers pipeline call
    ("transformers.generation.", "GenerationMixin.generate"),   # text generation
    ("torch.nn.modules.module.", "Module._call_impl"),          # any nn.Module call (a forward pass)
    ("torch.autograd.", "backward"),                            # a backward pass
    ("torch.optim.optimizer.", "Optimizer.step"),               # an optimizer step (and its wrappers)
)


def _is_entry(name: str) -> bool:
    return any(name.startswith(m) and name.endswith(q) for m, q in WORK_ENTRIES)


def _entry_phases(index, r0: int, r1: int) -> Phases | None:
    """The work window from the samples inside a well-known entry point (``WORK_ENTRIES``): from the start
    of the first such sample's interval to the last such sample; None when no sample is inside one."""
    fids = {i for i, f in enumerate(index.functions) if _is_entry(f.name)}
    if not fids:
        return None
    hit = np.flatnonzero(_on_stack(index, fids) & ~index.idle)  # (an import inside the call is inside it)
    if not len(hit):
        return None
    first, last = int(hit[0]), int(hit[-1])
    w0 = max(r0, int(index.t[first] - index.weight[first]))
    w1 = min(r1, int(index.t[last]))
    stack = index.stack_funcs[int(index.stack[first])]
    entry = next((index.functions[f].name for f in stack if f in fids), None)  # the outermost (root first)
    return Phases(r0, w0, max(w1, w0), r1, True, entry=entry)


#: A stack holding one of these functions is importing a module: start-up work wherever it happens
#: (a lazy import inside the traced work, the first use of a PIL plugin) and never the work itself.
#: ``_handle_fromlist`` runs ``from package import name`` (and imports ``name`` when it is a submodule not loaded
#: yet): a sample in it is the import statement's own time, never the work's.
IMPORT_FUNCS = ("importlib._bootstrap._find_and_load", "importlib._bootstrap._load", "importlib.import_module",
                "importlib._bootstrap._gcd_import", "_frozen_importlib._find_and_load",
                "importlib._bootstrap._handle_fromlist", "_frozen_importlib._handle_fromlist")
#: Any function of the import system's own modules is import work too, whatever called it: a relative
#: ``from . import name`` run inside a function reads ``__spec__.parent`` (``ModuleSpec.parent``) straight from C,
#: with none of ``IMPORT_FUNCS`` above it.
IMPORT_MODULES = ("importlib._bootstrap.", "importlib._bootstrap_external.", "_frozen_importlib.",
                  "_frozen_importlib_external.")


def _on_stack(index, fids: set) -> np.ndarray:
    """Per sample of ``index``: True when one of the functions ``fids`` is on its stack."""
    if not fids or not len(index):
        return np.zeros(len(index), bool)
    per_stack = np.array([any(f in fids for f in st) for st in index.stack_funcs] or [False])
    return per_stack[index.stack]


def importing(index) -> np.ndarray:
    """Per sample of ``index`` (a ProfileIndex): True when its stack is importing (``IMPORT_FUNCS``, or any function
    of ``IMPORT_MODULES``). Computed once per index (every phase view asks for it)."""
    got = getattr(index, "_importing", None)
    if got is None or len(got) != len(index):
        got = _on_stack(index, {i for i, f in enumerate(index.functions)
                                if f.name in IMPORT_FUNCS or f.name.startswith(IMPORT_MODULES)})
        index._importing = got
    return got


def sample_phase(index, ph: Phases) -> np.ndarray:
    """Per sample of ``index`` (a ProfileIndex): STARTUP (before the work, or importing), WORK or
    SHUTDOWN (int8)."""
    out = np.full(len(index), WORK, dtype=np.int8)
    if ph.split:
        out[index.t >= ph.work_end_ns] = SHUTDOWN
    out[importing(index)] = STARTUP
    if ph.split:
        out[index.t <= ph.work_start_ns] = STARTUP  # (a sample stands for the interval before its time)
    return out


def work_samples(index, ph: Phases) -> np.ndarray:
    """Indices of the busy samples (``ProfileIndex.busy``) of the work: inside its window, not importing."""
    busy = index.busy()
    return busy[sample_phase(index, ph)[busy] == WORK]


def startup_samples(index, ph: Phases) -> np.ndarray:
    """Indices of the busy samples of start-up: before the work window, or importing (only these when not
    split)."""
    busy = index.busy()
    return busy[sample_phase(index, ph)[busy] == STARTUP]
