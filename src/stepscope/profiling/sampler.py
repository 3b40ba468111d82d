"""The sampling profiler: every thread's Python stack, on the spans' clock.

Shape of the data (Sentry's sampled profile v1 and speedscope's shared frame table):

- a frame table, one entry per distinct ``(code object, current line)``: ``(function, module, file, line)``
  (looked up by ``(code, f_lasti)``, a plain read, so the line number is computed once per instruction);
- a stack table, one entry per distinct stack: a tuple of frame indices, **root first**;
- samples: ``(t_ns, thread_id, stack_index)``, ``t_ns`` a ``perf_counter_ns`` reading.

The caller drives it: ``sample()`` takes one sample of every thread but the caller's own (the recorder
thread calls it at the profiling rate, see ``stepscope.session``). No frame object outlives ``sample()``:
only code objects are kept, as cache keys, so tensors held in locals are freed as usual. Stacks deeper
than ``max_depth`` keep the ``max_depth`` frames nearest the leaf and drop the rest toward the root.
Frames of stepscope's own launcher, wrappers and import hook are left out (``HIDDEN_FILES``).
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
from time import perf_counter_ns

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Files whose frames are left out of samples: stepscope's launcher, span probes, wrappers and import hook
#: (they sit between the user's frames and say nothing about the program), and runpy's bootstrap.
HIDDEN_FILES = frozenset({os.path.join(_HERE, "launch.py"), os.path.join(_HERE, "api.py"), runpy.__file__,
                          "<frozen runpy>"} | {os.path.join(_HERE, "tracing", f) for f in (
                              "wrappers.py", "patch.py", "probes.py", "monitoring.py", "codeswap.py", "mechanism.py")})


#: Threads of stepscope's own (recorder, clock markers): never sampled.
OWN_THREADS: set[int] = set()


class Sampler:
    """Collects samples into append-only tables; ``drain()`` hands over what is new since the last call."""

    def __init__(self, max_depth: int = 256) -> None:
        self.max_depth = max_depth
        self._frame_index: dict[tuple, int] = {}  # (code, last instruction) -> frame index, -1 if hidden
        self._line_index: dict[tuple, int] = {}  # (code, line) -> frame index
        self._next_frame = 0
        self._code_info: dict = {}
        self._stack_index: dict[tuple, int] = {}
        self._new_frames: list[tuple] = []  # (function, module, file, line)
        self._new_stacks: list[tuple] = []  # root-first tuples of frame indices
        self._samples: list[tuple] = []  # (t_ns, thread_id, stack_index)
        self.sample_count = 0
        self.truncated = 0
        #: the thread ids of the last sample (the recorder notices an id reused by a new thread)
        self.last_threads: list[int] = []

    def sample(self, exclude_thread: int | None = None) -> int:
        """Sample every thread's stack once; returns the number of threads sampled."""
        frames = sys._current_frames()
        t = perf_counter_ns()
        me = threading.get_ident() if exclude_thread is None else exclude_thread
        frame_index = self._frame_index
        stack_index = self._stack_index
        max_depth = self.max_depth
        n = 0
        for tid, f in frames.items():
            if tid == me or tid in OWN_THREADS:
                continue
            leaf_first = []
            depth = 0
            while f is not None and depth < max_depth:
                key = (f.f_code, f.f_lasti)  # f_lasti is a plain read; f_lineno is computed
                idx = frame_index.get(key)
                if idx is None:
                    idx = self._add_frame(key, f)
                if idx >= 0:
                    leaf_first.append(idx)
                    depth += 1
                f = f.f_back
            if f is not None:
                self.truncated += 1
            key = tuple(leaf_first)
            sidx = stack_index.get(key)
            if sidx is None:
                sidx = len(stack_index)
                stack_index[key] = sidx
                self._new_stacks.append(key[::-1])
            self._samples.append((t, tid, sidx))
            n += 1
        self.last_threads = list(frames)
        del frames, f
        self.sample_count += n
        return n

    def _add_frame(self, key: tuple, f) -> int:
        code = key[0]
        line = f.f_lineno
        if code.co_filename in HIDDEN_FILES:
            self._frame_index[key] = -1
            return -1
        info = self._code_info.get(code)
        if info is None:
            module = f.f_globals.get("__name__", "") if f.f_globals is not None else ""
            function = getattr(code, "co_qualname", code.co_name)
            info = (function, module if isinstance(module, str) else "", code.co_filename)
            self._code_info[code] = info
        # several instructions share a line: one frame per (code, line)
        idx = self._line_index.get((code, line))
        if idx is None:
            idx = self._next_frame
            self._next_frame += 1
            self._line_index[(code, line)] = idx
            self._new_frames.append((info[0], info[1], info[2], line or 0))
        self._frame_index[key] = idx
        return idx

    def drain(self) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """Return and forget ``(new_frames, new_stacks, samples)`` recorded since the last drain.

        Frame and stack indices continue across drains (the tables are append-only).
        """
        frames, self._new_frames = self._new_frames, []
        stacks, self._new_stacks = self._new_stacks, []
        samples, self._samples = self._samples, []
        return frames, stacks, samples
