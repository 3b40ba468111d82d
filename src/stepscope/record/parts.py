"""The parts of a recording, assembled in one place: what a session records besides the traced names' spans and
every thread's samples (``session.Session``: spans, samples, the memory lane, the recorder thread).

Every session is made the same way from its ``Settings``, whoever starts it; its *origin* (``Session.origin``) says
who did:

- ``"run"``: the launcher (``launch``): `stepscope run`'s program, and each new interpreter of its job;
- ``"api"``: the program's own code (``stepscope.init``, ``api.start``);
- ``"window"``: a capture window of the control server (``control``: `stepscope capture --pid`);
- ``"fork"``: a forked child of a recorded process, recorded in turn (``processes.follow_fork``).

``PARTS`` lists the parts. Each says in its ``wanted(settings, origin)`` whether a session records it: from its
settings, and, where an origin legitimately differs, there and only there, with the reason in its docstring.
``Parts`` (``Session.parts``) starts those a session wants: the early ones (``Part.early``) once the run's row is
written and before the traced names are patched (the device trace: every traced call, a window's included, lies
inside it), the others once they are patched, before the recorder starts. They stop at the session's finish, before
its final write, latest first (the collectives' held process groups are let go while the device profiler still
records, as they always were).

A part that cannot start (no torch) is one line on stderr (``stepscope: ...``) and the recording goes on without
it; in a capture window nothing of stepscope's reaches the program's output: ``Parts.failed`` keeps the reason and
the window is refused with it (``control``).

Stdlib only: torch and torch_xla are imported inside functions, once the program has them.
"""

from __future__ import annotations

import os
import sys

ORIGINS = ("run", "api", "window", "fork")


class PartFailed(Exception):
    """A part could not start. ``line``: what stderr says (without ``stepscope: ``); ``why``: the reason alone (a
    capture window's refusal)."""

    def __init__(self, line: str, why: str | None = None) -> None:
        super().__init__(line)
        self.line = line
        self.why = why or line


class Part:
    """One thing a session records. ``name``: in words; ``early``: started before the traced names are patched.
    Subclasses define ``wanted`` and ``start`` (raising ``PartFailed`` when they cannot), and ``stop`` when they
    have something to stop or write; one instance per session."""

    name = ""
    early = False

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        """Whether a session of ``origin`` (``ORIGINS``) with ``settings`` records this part."""
        raise NotImplementedError

    def start(self, session) -> None:
        """Start recording for ``session`` (its store and run are written; its patcher exists)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop, and write what was recorded into the run's folder (at the session's finish, before its final write)."""


def _installed(name: str) -> bool:
    """Whether the top-level module ``name`` can be imported (found, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def device_profiler(modules=None) -> str:
    """Which profiler records a device trace: "xla" (PyTorch/XLA's, ``device.xla_capture``) or "torch"
    (torch.profiler / Kineto, ``device.capture``). The one rule: ``STEPSCOPE_DEVICE_PROFILER=torch`` (anything but
    ``auto``/``xla``) says torch; else XLA where the program has imported torch_xla, torch where it has imported torch
    without it (it runs torch alone), and otherwise (nothing imported yet: a program about to start) XLA where
    torch_xla is installed. ``modules``: ``sys.modules`` (a test's stand-in)."""
    modules = sys.modules if modules is None else modules
    choice = os.environ.get("STEPSCOPE_DEVICE_PROFILER", "auto").strip().lower()
    if choice not in ("auto", "xla"):
        return "torch"
    if "torch_xla" in modules:
        return "xla"
    if "torch" in modules:
        return "torch"
    return "xla" if _installed("torch_xla") else "torch"


class DeviceTrace(Part):
    """``settings.device_trace``: the device profiler's timeline (``device_profiler``): torch.profiler now, with
    ``device_stacks``/``device_steps``, or the XLA profiler once the program imports torch_xla (now, if it has).
    Not in a forked child: a profiler does not start again in a copy of a process that ran one (the parent's
    profiler state is copied; CUDA cannot be used after a fork)."""

    name = "device trace"
    early = True

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return settings.device_trace and origin != "fork"

    def start(self, session) -> None:
        self.session, self.cap = session, None
        settings = session.settings
        if device_profiler() == "xla":
            if settings.device_steps or settings.device_stacks:
                session.parts.say("--device-steps/--device-stacks apply to torch.profiler; the XLA profiler records "
                                  "the whole run")
            session.patcher.when_imported("torch_xla", self._start_xla)
            return
        from ..store.db import DEVICE_PROBE, DEVICE_TRACE
        from .device.capture import DeviceCapture

        st = session.store
        cap = DeviceCapture(st.run_file(session.run_id, DEVICE_TRACE, create=True),
                            st.run_file(session.run_id, DEVICE_PROBE), with_stack=settings.device_stacks,
                            steps=settings.device_steps)
        try:
            cap.start()
        except ImportError as e:
            raise PartFailed(f"--device-trace needs torch ({e}); recording without the device timeline",
                             f"--device-trace needs torch ({e})") from None
        except Exception as e:  # never into the program
            raise PartFailed(f"--device-trace: recording without the device timeline: {e}",
                             f"--device-trace: {type(e).__name__}: {e}") from None
        self.cap = cap

    def _start_xla(self, _torch_xla) -> None:
        """The program has imported torch_xla: start the XLA profiler; a failure is one line (``Parts.fail``)."""
        from ..store.db import XLA_METRICS, XLA_TRACE_DIR
        from .device.xla_capture import XlaCapture

        session = self.session
        st = session.store
        cap = XlaCapture(st.run_file(session.run_id, XLA_TRACE_DIR, create=True),
                         st.run_file(session.run_id, XLA_METRICS), note=session.patcher.note)
        try:
            cap.start()
        except Exception as e:
            session.parts.fail(PartFailed(f"--device-trace: recording without the XLA timeline: {e}",
                                          f"--device-trace: {e}"))
            return
        self.cap = cap

    def stop(self) -> None:
        if self.cap is not None:
            self.cap.stop()


class CompileReport(Part):
    """``settings.compile_report``: torch.compile's graph breaks and recompilations (``device.compile_report``).
    Not in a forked child: the parent's recorder holds torch's loggers there (copied with their handlers), and a
    second one would see none of their records."""

    name = "compile report"
    early = True

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return settings.compile_report and origin != "fork"

    def start(self, session) -> None:
        from ..store.db import COMPILE_REPORT
        from .device.compile_report import CompileRecorder

        self.rec = CompileRecorder()
        try:
            self.rec.start()
        except ImportError as e:
            raise PartFailed(f"--compile-report needs torch ({e}); recording without it",
                             f"--compile-report needs torch ({e})") from None
        self.path = session.store.run_file(session.run_id, COMPILE_REPORT, create=True)

    def stop(self) -> None:
        self.rec.stop(self.path)


class MemoryHistory(Part):
    """``settings.memory_history``: CUDA's allocator history once the program imports torch (now, if it has), its
    snapshot written when the program runs out of memory (``memory.history.History``; ``Session.note_oom``)."""

    name = "memory history"
    early = True

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return settings.memory_history

    def start(self, session) -> None:
        from ..store.db import MEMORY_SNAPSHOT
        from .memory.history import History

        session.history = History(session.store.run_file(session.run_id, MEMORY_SNAPSHOT, create=True))
        session.patcher.when_imported("torch", session.history.start)


class AppPreset(Part):
    """``settings.app``: the app preset (``apps``): its labels, facts and ops, and its names traced, before the
    settings' own names (``Session.preset``; the names this app version lacks are one line at the finish)."""

    name = "app preset"
    early = True

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return settings.app is not None

    def start(self, session) -> None:
        from . import apps

        session.preset = apps.get(session.settings.app)  # (a known name: ``Settings`` checked it)
        session.patcher.use_preset(session.preset)
        session.patcher.add(session.preset.traces)


class DynamoHooks(Part):
    """Always: the traced code seen right by torch.compile once the program imports it (``dynamo_hooks``)."""

    name = "dynamo hooks"

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return True

    def start(self, session) -> None:
        from .dynamo_hooks import dynamo_loaded

        session.patcher.when_imported("torch._dynamo", dynamo_loaded(session.patcher))


class Collectives(Part):
    """Always: torch.distributed's collectives (``tracing.collectives.COLLECTIVES``: spans with their bytes and
    group) and ``destroy_process_group`` (``GroupEndSite``: its groups kept to the session's finish where the torch
    profiler ran), once the program imports ``C10D`` (now, if it has); never imports it."""

    name = "collectives"

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return True

    def start(self, session) -> None:
        from .tracing.collectives import C10D, COLLECTIVES, GROUP_END

        def add(mod) -> None:
            session.patcher.add([f"{C10D}.{n}" for n in (*COLLECTIVES, GROUP_END) if callable(getattr(mod, n, None))])

        session.patcher.when_imported(C10D, add)

    def stop(self) -> None:
        from .tracing.collectives import release_groups

        release_groups()


class Ddp(Part):
    """DDP's gradient all-reduce (``tracing.ddp``: backward spans, joined with c10d's flight recorder at each flush)
    once the program imports ``DDP_MODULE``. Not with a device trace: the device trace has the collectives, and
    reading the flight recorder while the profiler runs hung DDP jobs (see ``tracing.ddp``)."""

    name = "ddp"

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return not settings.device_trace

    def start(self, session) -> None:
        from .tracing import ddp

        def add(_mod) -> None:
            if session.ddp is None:
                from .spans.buffer import next_span_id

                session.ddp = ddp.DdpJoin(next_span_id)
            session.patcher.add([ddp.BACKWARD])

        session.patcher.when_imported(ddp.DDP_MODULE, add)


class FlightRecorder(Part):
    """c10d's flight recorder sized in a torch.distributed rank (``tracing.ddp.enable_flight_recorder``), for the
    ``Ddp`` part: at a process's start, before the program makes its process group. Not in a capture window (the
    program's process group exists by then) nor in a forked child (its environment is its parent's, sized there)."""

    name = "flight recorder"

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return origin in ("run", "api")

    def start(self, session) -> None:
        from .tracing.ddp import enable_flight_recorder

        enable_flight_recorder()


class EndSignals(Part):
    """A stop signal that the program left at its default writes the run, then ends the process by it
    (``endsignals.end_by_signal``). Only in a process that stepscope started recording (``run``, ``fork``): under
    the API the program's own code started the recording and a capture window opens in a server thread of a
    running program; their signal handlers stay the program's. Starts after the session's at-fork hooks are
    registered (``forks.watch``, in ``Session.start``): in a forked child those record it (its own handlers set)
    before these hooks unblock the signals there (``endsignals._default_in_forked_child``)."""

    name = "end signals"

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return origin in ("run", "fork")

    def start(self, session) -> None:
        from .endsignals import end_by_signal

        end_by_signal(session)


class ForksFollowed(Part):
    """``settings.children``: a forked child is recorded in turn, as a process run of the job
    (``processes.follow_fork``). Only in a job that `stepscope run` records (``run``, ``fork``: its new interpreters
    are followed by ``processes``' start-up hook too); the API and a window record the process they run in."""

    name = "forks followed"

    #: how a forked child records itself (``processes.follow_fork``: it makes a session, so it sits above this module,
    #: which imports nothing of it), given by the entry points that make "run" sessions (``follow_forks_with``)
    follower = None

    @classmethod
    def wanted(cls, settings, origin: str) -> bool:
        return settings.children and origin in ("run", "fork")

    def start(self, session) -> None:
        session.on_forked_child = type(self).follower  # (None until an entry point gave one: not followed)


def follow_forks_with(follower) -> None:
    """Let ``ForksFollowed`` record a forked child with ``follower(parent_session)`` (``processes.follow_fork``; called
    by ``launch.main`` before its session starts, inherited by a forked child)."""
    ForksFollowed.follower = follower


#: every part, in the order they start (early ones first: ``Part.early``); they stop in the reverse order
PARTS: tuple[type[Part], ...] = (DeviceTrace, CompileReport, MemoryHistory, AppPreset, DynamoHooks, Collectives, Ddp,
                                 FlightRecorder, EndSignals, ForksFollowed)


def wanted_parts(settings, origin: str) -> list[type[Part]]:
    """The parts (``PARTS``, in order) that a session of ``origin`` with ``settings`` records. Raises ValueError
    for an origin not in ``ORIGINS``."""
    if origin not in ORIGINS:
        raise ValueError(f"origin: one of {', '.join(ORIGINS)}, got {origin!r}")
    return [p for p in PARTS if p.wanted(settings, origin)]


class Parts:
    """The parts one session records (``Session.parts``). ``start(early)`` starts the wanted parts of that phase
    (the first call also has ``stop`` run at the session's finish: ``Session.on_finish``); ``failed``: the reasons
    of those that could not start (``PartFailed.why``)."""

    def __init__(self, session) -> None:
        self.session = session
        self.started: list[Part] = []
        self.failed: list[str] = []
        self._armed = False

    def start(self, early: bool) -> None:
        """Start the parts of ``wanted_parts`` whose ``early`` is ``early``; one that fails is told (``fail``)."""
        s = self.session
        if not self._armed:
            s.on_finish(self.stop)
            self._armed = True
        for cls in wanted_parts(s.settings, s.origin):
            if cls.early != early:
                continue
            part = cls()
            try:
                part.start(s)
            except PartFailed as e:
                self.fail(e)
                continue
            self.started.append(part)

    def stop(self) -> None:
        """Stop the started parts, latest first; a failure is one line on stderr, the others still stop."""
        while self.started:
            part = self.started.pop()
            try:
                part.stop()
            except Exception as e:  # recorded, never raised into the program's exit
                self.say(f"{type(part).__name__}.stop failed: {e}")

    def say(self, line: str) -> None:
        """One line on stderr, ``stepscope: LINE``; none in a capture window (nothing into the program's output)."""
        if self.session.origin != "window":
            print(f"stepscope: {line}", file=sys.stderr)

    def fail(self, e: PartFailed) -> None:
        """A part could not start: keep why (``failed``) and say it (``say``)."""
        self.failed.append(e.why)
        self.say(e.line)
