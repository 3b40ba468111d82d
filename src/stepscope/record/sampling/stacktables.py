"""The sampler's frame and stack tables (``sampler.Sampler``'s, as a mixin): frames as (function, module, file, line),
stacks as frame indices, each added once and handed over once (``Sampler.drain``); the Python walk reads a thread's
frames into them (``_record``), the C walk's new frames and stacks are resolved into them once (``_take_walked``).
Stdlib only: this module runs inside the profiled program."""

from __future__ import annotations

import os
import runpy

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Files whose frames are left out of samples: stepscope's launcher, span probes, wrappers, import hook and
#: signal handler, notebook magic (they sit between the user's frames and say nothing about the program), and runpy's
#: bootstrap.
HIDDEN_FILES = frozenset({os.path.join(_HERE, "launch.py"), os.path.join(_HERE, "api.py"),
                          os.path.join(_HERE, "endsignals.py"), os.path.join(_HERE, "processes.py"), runpy.__file__,
                          "<frozen runpy>"} | {os.path.join(_HERE, "tracing", f) for f in (
                              "wrappers.py", "patch.py", "resolve.py", "globs.py", "importhook.py", "probes.py",
                              "monitoring.py", "codeswap.py", "mechanism.py")}
                         | {os.path.join(_HERE, "sampling", "signals.py"), os.path.join(_HERE, "memory", "history.py")}
                         # the notebook's magic and handle (between the kernel's frames and the cell's)
                         | {os.path.join(os.path.dirname(_HERE), "notebook", f) for f in ("magics.py", "handle.py")})



class StackTables:
    """The tables of ``Sampler`` (its ``__init__`` makes them: ``_frame_index``, ``_stack_index``, ``_line_index``,
    ``_code_info``, ``_alive``, ``_new_frames``, ``_new_stacks``, ``_walk_frames``, ``_walk_stacks``, ``_cols``,
    ``_walker``, ``max_depth``); called with its lock held."""

    def _record(self, f, tid: int, t: int, wall: int, cpu: int) -> int:
        walker = self._walker
        if walker is not None:  # the C walk: f and its callers read in place (``Walker.walk``)
            si = walker.walk(f)
            if walker.unseen:
                self._take_walked()
            return self._record_stack(self._walk_stacks[si], tid, t, wall, cpu)
        frame_index = self._frame_index
        leaf_first = []
        depth = 0
        max_depth = self.max_depth
        while f is not None and depth < max_depth:
            # id(code): a code object's own hash is computed anew on every call (~0.5 us for a large one);
            # _add_frame keeps the code alive, so its id is not reused. f_lasti is a plain read, f_lineno computed
            key = (id(f.f_code), f.f_lasti)
            idx = frame_index.get(key)
            if idx is None:
                idx = self._add_frame(key, f)
            if idx >= 0:
                leaf_first.append(idx)
                depth += 1
            f = f.f_back
        if f is not None:
            self._truncated += 1
        return self._record_stack(self._stack_of(tuple(leaf_first)), tid, t, wall, cpu)

    def _stack_of(self, key: tuple) -> int:
        """The stack index of ``key`` (frame indices, leaf first), added if new."""
        sidx = self._stack_index.get(key)
        if sidx is None:
            sidx = len(self._stack_index)
            self._stack_index[key] = sidx
            self._new_stacks.append(key[::-1])
        return sidx

    def _record_stack(self, sidx: int, tid: int, t: int, wall: int, cpu: int) -> int:
        c = self._cols
        c[0].append(t)
        c[1].append(tid)
        c[2].append(sidx)
        c[3].append(wall)
        c[4].append(cpu)
        self.last_stack = sidx
        return sidx

    def _add_frame(self, key: tuple, f) -> int:
        code = f.f_code
        cid = key[0]
        self._alive[cid] = code
        info = self._code_info.get(cid)  # by id: hashing a large code object (a module's) costs microseconds
        if info is None:
            if code.co_filename in HIDDEN_FILES:
                info = None
                self._code_info[cid] = False
            else:
                module = f.f_globals.get("__name__", "") if f.f_globals is not None else ""
                function = getattr(code, "co_qualname", code.co_name)
                info = self._code_info[cid] = (function, module if isinstance(module, str) else "", code.co_filename)
        if not info:
            self._frame_index[key] = -1
            return -1
        idx = self._frame_index[key] = self._line_frame(cid, info, f.f_lineno)
        return idx

    def _line_frame(self, cid: int, info: tuple, line: int | None) -> int:
        """The frame index of line ``line`` (None: none) of code ``cid`` (``info``: function, module, file), added if
        new: several instructions share a line, so there is one frame per (code, line)."""
        idx = self._line_index.get((cid, line))
        if idx is None:
            idx = self._next_frame
            self._next_frame += 1
            self._line_index[(cid, line)] = idx
            self._new_frames.append((info[0], info[1], info[2], line or 0))
        return idx

    def _take_walked(self) -> None:
        """The C walk's new frames and stacks into these tables, once each: a frame, ``(code, line or -1, module)``
        (the module: its first frame's ``__name__``; hidden codes never come), as ``_add_frame`` resolves one; a
        stack, leaf-first walker frame indices, as ``_record`` makes one."""
        frames, stacks = self._walker.take()
        wf = self._walk_frames
        for code, line, module in frames:
            cid = id(code)
            self._alive[cid] = code
            info = self._code_info.get(cid)
            if not info:
                info = self._code_info[cid] = (getattr(code, "co_qualname", code.co_name), module, code.co_filename)
            wf.append(self._line_frame(cid, info, line if line >= 0 else None))
        self._walk_stacks.extend([self._stack_of(tuple([wf[i] for i in key])) for key in stacks])
