"""A recording session: patches the traced names, runs the recorder thread, writes the store.

The recorder thread is a daemon that samples every thread at ``profiles_hz`` (101 Hz by default, as sentry-python;
sleep compensates drift; the other threads' rate under the overhead budget: ``sampling.budget``) and, every
``flush_interval_s`` (or as soon as ``FLUSH_SPANS`` spans wait), writes finished spans, new frames/stacks and samples
to the store (its loop: ``recorderloop``). Memory stays bounded however long the run; a crash loses at most the last
flush interval. A write that fails (a full disk) ends the recording there, never the program: the run is marked
``incomplete`` with the reason, and nothing is printed into the program's output. Stdlib only: this module runs
inside the profiled program.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time

from ..core import clock
from ..core.model import Run
from .memory import history as _memory
from .sampling.budget import Budget
from .sampling.cpuwake import IDLE_LOOK_NS, CpuWake
from .sampling.sampler import Sampler, start_thread
from .sampling.signals import MainThreadSampler
from .envinfo import environment
from ..core.steprules import LOOP_TRACES
from .settings import Settings
from ..store import spanblock
from ..store.db import Store, write_error_text
from .spans import buffer
from .spans.record import REC_ATTRS, REC_ID, REC_NAME, REC_PARENT, REC_PROBE, REC_RESTORE, REC_START
from . import native
from .tracing import probes
from .steps import cpuwait, workfacts
from .tracing.patch import Patcher
from .parts import Parts
from .forks import SessionForks, forks
from .recorderloop import RecorderLoop


def new_run_id() -> str:
    """A sortable, unique run id: ``YYYYmmdd-HHMMSS-xxxx`` (local time, 4 random hex digits)."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(2).hex()


class Session(RecorderLoop, SessionForks):
    """One run being recorded in this process. Use ``start()`` once, ``finish()`` once.

    ``origin``: who started it, "run", "api", "window" or "fork"; what it records besides spans and samples follows
    from it and the settings (``parts``, ``Session.parts``). ``cut_open`` (a capture window of ``control.server``):
    the traced calls still running when the session finishes are stored as spans ending there, marked
    ``attrs["stepscope.cut"]`` (``cut_spans``); without it they leave no span (a program's run ends when its calls
    have)."""

    def __init__(self, settings: Settings, run_id: str | None = None, command: list[str] | None = None,
                 owns_run: bool = True, cut_open: bool = False, origin: str = "api") -> None:
        self.settings = settings
        self.origin = origin
        self.parts = Parts(self)
        self.run_id = run_id or new_run_id()
        self.command = command if command is not None else list(sys.argv)
        self.owns_run = owns_run  # False when `stepscope run` created the run row
        #: the job's top run (this run, or the run whose program started this process: ``processes``);
        #: ``on_forked_child(session)``: called in a forked child once the recording was undone there (None: the
        #: child stays unrecorded; ``processes.follow_fork`` records it as a process run of the job)
        self.top_run = self.run_id
        self.on_forked_child = None
        #: DDP's gradient all-reduce spans (``tracing.ddp.DdpJoin``), set once the program imports DDP
        self.ddp = None
        self.preset = None  # the app preset (``apps``) of ``settings.app``
        self.patcher = Patcher(mirror=settings.device_trace, track_open=cut_open, step_names=settings.step_functions,
                               labels=settings.labels)
        self._cut: list[tuple] = []  # the spans cut at the session's end, for the last flush
        hz = settings.profiles_hz
        self.sampler = Sampler(settings.max_stack_depth, int(1e9 / hz) if hz > 0 else 10_000_000)
        #: the main thread sampled by timer signal (``profiling.signals``); other threads by the recorder
        self.main_sampler = MainThreadSampler(self.sampler)
        #: the memory lane (``profiling.memory``), None with ``memory=False``
        self.memory: _memory.MemoryLane | None = None
        self._span_memory: _memory.SpanMemory | None = None  # what the probes read at span entry and exit
        self.history: _memory.History | None = None
        self._open_written = False  # provisional rows of open spans were written (``_open_chain``)
        self._open_ids: list[int] = []  # ... the ids of those of the last write, and when it was (``_flush``)
        self._written_t = 0
        self.store: Store | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Lock()  # held while recording; released by finish (wakes a paused recorder)
        self.cpu_wake: CpuWake | None = None  # the recorder thread's rest until the process uses CPU (``cpuwake``)
        self.own_timers = None  # the busy threads' own timers' signal (``owntimers.OwnTimers``)
        # (rests, woken by CPU time, a wake or a span, waits, woken by a span) of ended recorder threads
        self._rested = (0, 0, 0, 0)
        self._wake.acquire()
        self._lock = threading.RLock()
        self._frames_written = 0
        self._stacks_written = 0
        self._threads_seen: dict[int, str] = {}
        self._pending_threads: dict[int, tuple] = {}
        self._thread_objs: dict[int, threading.Thread] = {}
        self._pending_os: list[tuple] = []
        self._root_token = None
        self._root_span: tuple | None = None
        self._pid = os.getpid()
        self._fork_frame = None  # (before_fork: the frame that called os.fork)
        self._alone_at_fork = False
        self._gen = 0  # the recorder thread's generation: a thread of an older one ends (parked for a fork)
        self.finished = False
        self._finishers: list = []
        self.unresolved: dict[str, str] = {}
        self.status = "ok"
        self.exit_code: int | None = 0
        self.error: str | None = None
        self.oom: dict | None = None  # the out-of-memory error the program ended by (``note_oom``)
        self._dying = False  # finishing from a fatal signal's handler: the open spans stay open
        #: ``endsignals.StopWatch``: stop signals passed on to a main thread blocked in C (set by ``end_by_signal``)
        self.stop_watch = None
        self._finishing: int | None = None  # the thread in ``finish`` (a signal handler on it completes the write)
        self._completed = False  # ``_complete`` ran (the final write is done once)
        self._written = False  # ``_complete`` ended
        self._die_by = 0  # a stop signal that came during ``_complete``: it ends by killing the process with it
        self.store_error: str | None = None  # the first failed write (e.g. "store full at PATH"); none after it

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "Session":
        self.anchor = clock.Anchor.take()
        self.store = Store(self.settings.store)
        run = Run(id=self.run_id, command=self.command, cwd=os.getcwd(), host=socket.gethostname(),
                  pid=os.getpid(), start_ns=self.anchor.mono_ns, anchor_mono_ns=self.anchor.mono_ns,
                  anchor_wall_ns=self.anchor.wall_ns, env=environment(), settings=self.settings.to_dict())
        if self.owns_run:
            self.store.create_run(run, self.anchor.wall_ns)
        else:
            self.store.update_run(self.run_id, pid=run.pid, start_ns=run.start_ns, anchor_mono_ns=run.anchor_mono_ns,
                                  anchor_wall_ns=run.anchor_wall_ns, env=run.env, host=run.host, cwd=run.cwd)
        buffer.take()  # spans from an earlier session in this process are not ours
        workfacts.reset()
        if self.settings.memory:
            self.memory = _memory.MemoryLane()
            self.main_sampler.memory = self.memory
            self._span_memory = _memory.SpanMemory(self.memory, self.settings.cuda_peaks)
            probes.set_span_memory(self._span_memory)
            cpuwait.use(self._span_memory.run_delay)  # (a sampler loop's iterations read it: steps.hooks)
        self.parts.start(early=True)  # (before the names are patched: the device trace, the app preset: ``parts``)
        self.patcher.add(self.settings.functions_to_trace + self.settings.step_functions)
        if self.settings.loop_rules and (self.settings.functions_to_trace or self.settings.step_functions
                                         or self.preset is not None):
            self.patcher.add(LOOP_TRACES, quiet=True)  # the sampler loops' steps (``steps.rules``)
        forks.watch(self)  # (its at-fork hooks first: the end signals' unblock a forked child's after they ran)
        self.parts.start(early=False)
        if self.settings.transaction:
            self._open_root(self.settings.transaction)
        if self.settings.profiles_hz > 0 and self.settings.sampler != "thread":
            self.main_sampler.start(self.sampler.period_ns)
        elif self.settings.sampler == "thread":
            self.main_sampler.note = "--sampler thread"
        self.recorder_error: str | None = None
        #: the other threads' rate under the overhead budget (``sampling.budget``), while sampling
        self.budget: Budget | None = None
        self._start_recorder()
        atexit.register(self._atexit)
        return self

    def _start_recorder(self) -> None:
        th = threading.Thread(target=self._loop, args=(self._gen,), name="stepscope-recorder", daemon=True)
        th._stepscope_gen = self._gen
        self._thread = th
        start_thread(th)

    def on_finish(self, fn) -> None:
        """Call ``fn()`` when the session finishes, before the final write (e.g. stop its parts: ``parts``)."""
        self._finishers.append(fn)

    def _open_root(self, name: str) -> None:
        sid = buffer.next_span_id()
        self._root_span = (sid, name, clock.now_ns(), threading.get_ident())
        self._root_token = buffer.current_span.set(buffer.open_record(sid, name, self._root_span[2]))

    def _close_root(self) -> None:
        if self._root_span is None:
            return
        sid, name, start, tid = self._root_span
        err = None if self.status == "ok" else (self.error or self.status)
        buffer.finished.append((sid, None, name, "transaction", start, clock.now_ns(), tid, err, None))
        self._root_span = None
        if self._root_token is not None:
            try:
                buffer.current_span.reset(self._root_token)
            except ValueError:
                pass
            self._root_token = None

    def set_outcome(self, status: str, exit_code: int | None = None, error: str | None = None) -> None:
        """Record how the program ended (written by ``finish``)."""
        self.status, self.exit_code, self.error = status, exit_code, error

    def finish(self) -> None:
        """Stop sampling, close the root transaction, undo patches, write everything. Idempotent. Does nothing in
        a forked child (the run is the parent's)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            if self.finished:
                return
            self.finished = True
        ms = self.main_sampler
        if ms.resting and threading.current_thread() is threading.main_thread():
            # its wait since the recorder's last look (maybe long: a recorder resting too) charged at the waiting
            # stack, the run since at this one, as its own CPU tick's wake would (``MainThreadSampler.wake``)
            try:
                ms.wake(sys._getframe(1), time.perf_counter_ns())
            except Exception:  # (a bug of stepscope's: never into the program; the wait's tail is lost, as before)
                pass
        ms.stop()
        probes.release_span_memory(self._span_memory)
        self._stop.set()
        try:
            self._wake.release()
        except RuntimeError:
            pass
        self._wake_resting()
        self._finishing = threading.get_ident()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
            if not self._thread.is_alive() and self.settings.profiles_hz > 0 and self.recorder_error is None:
                # a last look: each other thread charged the time since the recorder's last look (a recorder that
                # rested while nothing ran looked last up to a flush interval ago), at its stack; the main thread too
                # when the recorder sampled it all along (its timers' samples end at ``stop``)
                try:
                    self.sampler.sample(skip=() if ms.signum is None else (threading.main_thread().ident,))
                except Exception as e:  # (as the recorder thread's own failures: kept with the run, never printed)
                    self.recorder_error = f"{type(e).__name__}: {e}"
        self._complete()

    def _complete(self) -> None:
        """The rest of ``finish`` once the recorder stopped (or a signal cut the wait short): the final write, once."""
        with self._lock:
            if self._completed:
                return
            self._completed = True
        self._close_root()
        for fn in self._finishers:
            try:
                fn()
            except Exception as e:  # recorded, never raised into the program's exit
                print(f"stepscope: {getattr(fn, '__qualname__', fn)} failed: {e}", file=sys.stderr)
        self.unresolved = self.patcher.unresolved
        if self.preset is not None:  # the preset's names this app version lacks: one line
            from .apps import missing_line

            self.unresolved, line = missing_line(self.preset, self.unresolved)
            if line:
                self.unresolved[f"--app {self.preset.name}"] = line
        from .tracing.probes import compiled_notes

        for name, outer in compiled_notes().items():  # ran as part of a torch.compile graph
            where = ", ".join(o for o in outer if o) or "the span around the compiled call"
            self.unresolved[name] = f"inside a compiled region: timed as part of {where}"
        mechanism = getattr(self.patcher._mechanism, "name", None)  # (None when nothing was traced)
        code = self.patcher.code_locations()
        overrides = self.patcher.overrides
        self.patcher.remove()
        if self.patcher.live is not None:  # no call is traced from here on: those still open end now
            self._cut = self.cut_spans(clock.now_ns())
        self._flush()
        end = clock.now_ns()
        status, error = self.status, self.error
        if self.store_error is not None:  # the program ran on; its recording stops at the failure
            status, error = "incomplete", self.store_error
        try:
            env = environment()
            env["sampler"] = self.sampler_info()
            env["tracing"] = mechanism  # monitoring (3.12+) or code (3.11): how the spans were recorded
            env["code"] = code  # span name -> [file, line] of the traced function
            if overrides:  # a traced method -> every override traced with it (which ran: the first screen's note)
                env["overrides"] = overrides
            # the C recorder (record.native) or the pure-Python one; a capture window's calls all go through Python
            env["recorder"] = native.RECORDER if self.patcher.live is None else "python"
            if native.load_error:  # a .so that could not load: the one line, here only
                env["recorder_note"] = native.load_error
            mem = self.memory_info()
            if mem:
                env["memory"] = mem
            self.store.update_run(self.run_id, status=status, exit_code=self.exit_code, error=error,
                                  end_ns=end, env=env, unresolved=self.unresolved)
        except Exception as e:  # `stepscope run` tells the user; never into the program's exit
            self.store_error = self.store_error or write_error_text(e, self.store.path)
        try:
            self.store.close()
        except Exception:
            pass
        if self._thread is None or not self._thread.is_alive():  # (the recorder gone: nothing reads the walker)
            self.sampler.hand_on()
        if self.memory is not None:
            self.memory.close()
            self._span_memory.close()
        try:
            atexit.unregister(self._atexit)
        except Exception:
            pass
        self._written = True
        if self._die_by:  # a stop signal came during this write: the process dies by it now, as it would have
            signal.signal(self._die_by, signal.SIG_DFL)
            os.kill(os.getpid(), self._die_by)

    def memory_info(self) -> dict:
        """The run's memory facts for ``env["memory"]`` (``memory.history.run_facts``: the lane, the OOM record set by
        ``note_oom``, ``--memory-history``'s snapshot)."""
        return _memory.run_facts(self.memory, self.history, self.oom, self.settings.cuda_peaks)

    def note_oom(self, exc: BaseException) -> None:
        """The program is ending by an out-of-memory error (``memory.history.is_oom``): keep memory now and, with
        ``--memory-history``, write the allocator snapshot (``memory.history.oom_record``). Called by ``launch``
        before ``finish``."""
        self.oom = _memory.oom_record(exc, self.history)

    def sampler_info(self) -> dict:
        """``env["sampler"]``: ``main`` ("signal" | "signal, then thread" | "thread"), ``note`` (why not by signal),
        ``walk`` ("c" | "python": how other threads' stacks were read; ``walk_note``: why not in C), others."""
        ms = self.main_sampler
        info = {"main": "thread" if ms.signum is None else "signal" if ms.note is None else "signal, then thread",
                "note": ms.note, "walk": self.sampler.walk}
        if ms.signum is not None:
            info["handler"] = ms.handler  # the main thread's signal handler: "c" (record/native/sigtick.c) or "python"
        info.update({"walk_note": self.sampler.walk_note} if self.sampler.walk_note else {})
        if self.recorder_error:
            info["recorder_error"] = self.recorder_error
        if ms.pauses:
            info["paused"] = f"{ms.pauses} time(s): the program ran its own tracer or profiler"
        if ms.rests:
            info["rests"] = ms.rests  # times the waiting main thread was sampled from the recorder (``signals.rest``)
        if ms.blocked_rests:  # ... of which the recorder rested it, blocked where its handler cannot run
            info["blocked_rests"] = ms.blocked_rests
        rests, woken, waits, by_call = self._rested
        w = self.cpu_wake
        if w is not None:
            rests, woken, waits, by_call = rests + w.rests, woken + w.woken, waits + w.waits, by_call + w.by_calls
        if rests:  # times the recorder rested while no thread ran, was woken by the process's CPU use (``cpuwake``),
            info.update(idle_rests=rests, idle_woken=woken, idle_waits=waits)  # and its waits in them
        if by_call:  # ... of its wakes, those by a span that started (a traced call: ``_native.call_wake``)
            info["idle_woken_by_call"] = by_call
        remote, missed = self.sampler.remote_looks
        if remote:  # looks that read a busy thread's stack without the GIL (record/native/remote.c), and the threads
            info.update(looks_without_gil=remote, looks_without_gil_missed=missed)  # they left to a look with it
        threads, samples, missed = self.sampler.own_timers
        if threads:  # busy threads sampled by a timer of their own (record/native/ownclock.c)
            info.update(own_timers=threads, own_timer_samples=samples, own_timer_missed=missed)
        if self.budget is not None and self.budget.at_scale:  # the other threads' rates (``sampling.budget``)
            info.update(others_hz=self.budget.rates(), budget=self.settings.overhead_budget)
        return info

    def _atexit(self) -> None:
        if os.getpid() == self._pid:
            self.finish()

    def flush_on_signal(self, status: str, exit_code: int, error: str | None = None, signum: int = 0) -> bool:
        """Best-effort final write from a signal handler (the process is about to die). Returns whether the caller
        dies now; False when the signal came in the middle of this thread's final write (``_complete``): that write
        ends first, then kills the process by ``signum``."""
        if os.getpid() != self._pid:  # a forked child: the run is the parent's
            return True
        if self.finished and self._finishing == threading.get_ident() and self._completed:
            self._die_by = signum or self._die_by  # (the write under way was cut by this handler: it ends first)
            if not self._written:
                self.set_outcome(status, exit_code, error or status)
                return False
            return True
        self.set_outcome(status, exit_code, error or status)
        self._dying = True
        self.main_sampler.current = buffer.current_span.get()  # this handler runs in the main thread
        if self.finished and self._finishing == threading.get_ident():
            # the signal came while this thread was finishing (the program's exit: atexit), before the final
            # write: write now, the process dies after this handler
            self._complete()
            return True
        self.finish()
        return True

    def _open_chain(self) -> list[tuple]:
        """The main thread's open spans at its last wall tick (innermost first), as span tuples ending now with
        ``attrs["stepscope.open"]`` = True: written provisionally at each flush (a span's real row replaces
        its provisional one when it ends), so that a run killed outright (the kernel's OOM killer) still tells
        the span and step it died in. Needs the timer-signal sampler (it reads the main thread's span)."""
        rec = self.main_sampler.current
        out = []
        now = clock.now_ns()
        main = threading.main_thread().ident
        seen = 0
        while rec is not None and rec.__class__ is list and seen < 256:
            seen += 1
            sid = rec[REC_ID]
            if sid is not None and rec[REC_NAME] is not None and rec[REC_START]:  # (a C function wrapper's: no start)
                probe = rec[REC_PROBE]
                op = "transaction" if self._root_span is not None and sid == self._root_span[0] else (
                    probe.op if probe is not None else "function")
                attrs = {k: v for k, v in (rec[REC_ATTRS] or {}).items() if not k.startswith("_")}
                attrs["stepscope.open"] = True
                out.append((sid, rec[REC_PARENT], rec[REC_NAME], op, rec[REC_START], now, main, None, attrs))
            rec = rec[REC_RESTORE]
        if native.ext is not None and self.main_sampler.current is not None:  # the C recorder's open calls, read now
            for sid, parent, name, op, start in reversed(native.ext.open_spans(main)):
                out.append((sid, parent, name, op, start, now, main, None, {"stepscope.open": True}))
        return out

    def cut_spans(self, end_ns: int) -> list[tuple]:
        """The traced calls open now (``Patcher.live``: every thread's, suspended coroutines' too) as span
        tuples ending at ``end_ns``, marked ``attrs["stepscope.cut"]`` = True, outermost first."""
        live = dict(self.patcher.live or {})  # (one C-level copy: other threads go on entering and leaving)
        out = []
        for sid, (rec, tid) in live.items():
            if sid is None or rec[REC_NAME] is None or not rec[REC_START]:
                continue
            probe = rec[REC_PROBE]
            attrs = {k: v for k, v in (rec[REC_ATTRS] or {}).items() if not k.startswith("_")}
            attrs["stepscope.cut"] = True
            out.append((sid, rec[REC_PARENT], rec[REC_NAME], probe.op if probe is not None else "function",
                        rec[REC_START], max(end_ns, rec[REC_START]), tid, None, attrs))
        out.sort(key=lambda s: (s[4], s[0]))
        return out

    def _flush(self) -> None:
        with self._lock:
            frames, stacks, samples = self.sampler.drain()
            threads, self._pending_threads = self._pending_threads, {}
            os_threads, self._pending_os = self._pending_os, []
            for th in threading.enumerate():
                if th.ident is not None and self._threads_seen.get(th.ident) != th.name:
                    threads[th.ident] = (th.name, th.native_id)
            self._threads_seen.update({k: v[0] for k, v in threads.items()})
            open_spans = self._open_chain() if not self.finished or self._dying else []
            # the C recorder's calls straight into span blocks (no tuple a call), unless something below reads them:
            # the spans cut at the end (DDP's join reads only spans with hooks, the Python probe's: backward and
            # collective ones; a program that imports DDP's module, as most diffusers apps do, kept 13k tuples a
            # second of the tiny UNet's traced calls: 16 ms of the recorder's GIL time a second, the program's wait)
            blocks = buffer.take_native_blocks(spanblock.dumps_header, spanblock.BLOCK_SPANS) if not self._cut else []
            spans = buffer.take()
            if self._cut:  # (a call that ended meanwhile keeps its own span)
                ended = {s[0] for s in spans}
                spans.extend(s for s in self._cut if s[0] not in ended)
                self._cut = []
            if self.ddp is not None:  # DDP's gradient all-reduce of the backward spans here (tracing/ddp.py)
                try:
                    spans.extend(self.ddp.spans_for(spans))
                except Exception:  # never into the program
                    pass
            memory = self.memory.drain() if self.memory is not None else []
            if self.store_error is not None:  # dropped: memory stays bounded, the program goes on
                return
            # nothing new, the same open spans as written (their provisional end aside): no write, ~0.4 ms of CPU
            # (a transaction) a flush interval on an idle server; their end is brought up to date every IDLE_LOOK_NS
            t = clock.now_ns()
            opened = [s[0] for s in open_spans]
            if (not self.finished and not (frames or stacks or samples or threads or os_threads or blocks or spans
                                           or memory) and opened == self._open_ids
                    and t - self._written_t < IDLE_LOOK_NS):
                return
            try:
                self.store.append(self.run_id, spans=spans, blocks=blocks, frames=frames,
                                  frame_base=self._frames_written, stacks=stacks, stack_base=self._stacks_written,
                                  samples=samples, threads=threads,
                                  os_threads=os_threads, memory=memory, open_spans=open_spans,
                                  drop_open=self.finished and not self._dying and self._open_written,
                                  one_statement=not self.finished)  # (beside the running program: no GIL convoy)
                self._open_written = self._open_written or bool(open_spans)
                self._open_ids, self._written_t = opened, t
            except Exception as e:  # a full disk, say: recorded, never raised or printed into the program
                self.store_error = write_error_text(e, self.store.path)
                return
            self._frames_written += len(frames)
            self._stacks_written += len(stacks)
