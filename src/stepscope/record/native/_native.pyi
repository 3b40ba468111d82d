"""Stub of ``stepscope.record.native._native``, the C recorder (module.c and its parts; loaded by
``stepscope.record.native``). Times are ``time.perf_counter_ns`` readings (CLOCK_MONOTONIC, ns); span ids come from
one counter shared with the Python recorder (``next_id``), never 0; a thread is its ``threading.get_ident()``."""

from types import CodeType, FrameType
from typing import Any, Callable, Final, Iterable
from contextvars import ContextVar

#: a finished span as ``spans.buffer.SPAN_FIELDS``: (span_id, parent_id, name, op, start_ns, end_ns, thread_id,
#: error_type, attrs)
_Span = tuple[int, int | None, str, str, int, int, int, str | None, dict[str, Any] | None]

#: 3.12+: frame address -> the open-span record of a suspended generator/coroutine frame recorded in C
parked: Final[dict[int, list[Any]]]
#: 3.13+: frame address -> (weak reference to its generator, bytearray of 16 bytes: int64 ns of its last suspension,
#: uint64 thread id), for ``tracing.probes.end_closed``
parked_gen: Final[dict[int, tuple[Any, bytearray]]]
#: 3.13+: (record, note) of such frames freed before ``end_closed`` saw them
orphans: Final[list[tuple[list[Any], tuple[Any, bytearray]]]]

# layout.h, generated from the Python tables (tests/test_native_module.py checks they agree):
#: the open-span record's field indices (``stepscope.record.spans.record``)
REC_ID: Final[int]
REC_START: Final[int]
REC_PARENT: Final[int]
REC_PROBE: Final[int]
REC_ATTRS: Final[int]
REC_NAME: Final[int]
REC_ERROR: Final[int]
REC_RESTORE: Final[int]
REC_LEN: Final[int]
#: the span block format (``stepscope.core.spanformat``); ``SSB_INT_<COLUMN>``, ``SSB_CODE_<COLUMN>``: a column's
#: position among the int64, the int32 columns
SSB_MAGIC: Final[bytes]
SSB_VERSION: Final[int]
SSB_HEAD_BYTES: Final[int]
SSB_HEADER_ALIGN: Final[int]
SSB_NO_PARENT: Final[int]
SSB_NO_ERROR: Final[int]
SSB_INT_ID: Final[int]
SSB_INT_PARENT: Final[int]
SSB_INT_START: Final[int]
SSB_INT_END: Final[int]
SSB_INT_THREAD: Final[int]
SSB_INT_COLUMNS: Final[int]
SSB_CODE_NAME: Final[int]
SSB_CODE_OP: Final[int]
SSB_CODE_ERROR: Final[int]
SSB_CODE_COLUMNS: Final[int]


def setup(current_span: ContextVar[list[Any] | None], error_name: Callable[[type], str], DISABLE: object,
          max_pending: int, /) -> None:
    """Once, before any call is recorded: the ContextVar of the open-span records, the exception type -> name
    function, ``sys.monitoring.DISABLE`` (None before 3.12) and the most finished calls kept (``MAX_PENDING``)."""


def set_forward(start: Callable[..., Any] | None, resume: Callable[..., Any] | None,
                return_: Callable[..., Any] | None, yield_: Callable[..., Any] | None,
                throw: Callable[..., Any] | None, unwind: Callable[..., Any] | None, /) -> None:
    """The Python ``sys.monitoring`` callbacks that the ``mon_*`` functions hand a Python probe's code events to
    (co_extra 1), in this order; None: the event is ignored."""


def register(name: str, op: str, probe: object = None, kind: int = 0, /) -> int:
    """A new code index for spans named ``name`` of op ``op``. ``kind``: 0 plain, 1 generator/coroutine (3.12+
    ``sys.monitoring`` only: its records carry ``probe``), 2 denoiser (the Python ``probe`` takes its outermost
    calls). Raises ValueError for another kind."""


def mark(code: CodeType, value: int, /) -> None:
    """Set ``code``'s co_extra slot: 0 untraced, 1 a Python probe's (events handed on), 2 + index a native code."""


def next_id() -> int:
    """A new span id (unique in the process, never 0)."""


def parent_of(current: list[Any] | None, /) -> int | None:
    """The parent id of a span opened now, given the ContextVar's value: the larger of its id and this thread's
    innermost open native call's, or None (top level)."""


def top_name() -> str | None:
    """The name of this thread's innermost open native call, or None."""


def take() -> list[_Span]:
    """The finished calls as span tuples, oldest first; the columns emptied."""


def take_block(dumps: Callable[[object], str], max_spans: int, /) -> tuple[bytes, int, int] | None:
    """The oldest finished calls (at most ``max_spans``) as one span block (``core.spanformat``'s layout; ``dumps``
    writes its header's JSON): ``(body, n, first span id)``, taken out of the columns; None when there are none or
    on a big-endian machine. What ``dumps`` raises propagates, and nothing is taken."""


def pending() -> int:
    """How many finished calls wait for ``take``/``take_block``."""


def park(lock: Any, timeout_s: float, poll_s: float, finished: Any, limit: int, fd: int = -1, /) -> int:
    """The recorder thread's wait (``sampling.signals.park``): ``lock.acquire(True, timeout_s)``; 1 when acquired
    (released again: a wake-up). Otherwise, while a tool of the program's own would see this thread's calls (a
    ``sys.monitoring`` tool other than "stepscope" on ids 0-5, 3.12+, or this thread's ``setprofile``/``settrace``)
    it goes on waiting, ``poll_s`` s a wait: 2 once the tool is gone, 3 when ``len(finished)`` plus the C columns'
    finished calls reach ``limit``; 0 when there was none. Its checks are calls made from C, which raise no PEP 669
    CALL event. Raises what ``lock.acquire`` raises. ``lock`` may be a signal number instead (Linux): the wait is
    ``sigtimedwait(2)`` for that signal, which the calling thread must block, and 1 means it came (taken); with
    ``fd`` (a pipe's read end) the wait is a ``ppoll(2)`` on it and a ``signalfd(2)`` of the signal, and 1 also means
    ``fd`` became readable (its bytes are left for the caller); OSError
    where the wait fails, NotImplementedError elsewhere than Linux, ValueError for a number that is no signal."""


def run_delay(schedstat_fd: int, /) -> int:
    """The calling thread's run-queue wait so far (ns: ``/proc/thread-self/schedstat``'s second field), -1 where it
    cannot be read. The file (~20 us a read right after a step's torch work) is read again only when the thread left
    its CPU since its last read: the wait grows only then, and every such switch counts in ``getrusage``'s
    ``ru_nvcsw`` or ``ru_nivcsw`` (one cheaper system call), so the value is exact either way."""

def thread_id() -> int:
    """The calling thread's OS id, as ``threading.get_native_id()``: a ``gettid`` system call at its first call in a
    thread (and again in a forked child), none after."""

def readings(statm_fd: int, page: int, schedstat_fd: int, entry: bool = False, /) -> tuple[int, int, int]:
    """A step-level span's readings in one call (``memory.history.SpanMemory``): ``(rss, hwm, wait)``, the RSS in bytes
    (``/proc/self/statm``'s resident pages x ``page``), the kernel's RSS high-water mark in bytes (``getrusage``'s
    ``ru_maxrss``) and the calling thread's run-queue wait so far in ns (``/proc/thread-self/schedstat``); -1 for each
    that cannot be read (an fd < 0: not read; the high-water mark is read with the RSS). The GIL is kept. ``entry``:
    a span's entry, which takes the calling thread's last exit readings (``entry`` False) of the same files instead
    when they are under 2 ms old, once (the gap between two step-level spans counted in the second: each reading
    costs 9-15 us on a cache cooled by a denoising step)."""


def frame_args(frame: FrameType, n: int, /) -> tuple[Any, ...]:
    """The first ``n`` local variables of ``frame`` (its arguments, in ``co_varnames``' order; None where unset; a
    cell variable's content), read in place in its interpreter frame, with no ``f_locals`` dict made (3.11-3.13 with
    the GIL, as the stack walk). Raises ValueError when ``n`` exceeds the code's local variables."""


def outer_denoiser(frame: FrameType, prefixes: tuple[str, ...], /) -> FrameType | bool | None:
    """The outermost denoiser ``forward`` among ``frame`` and its callers (``steps.hooks._outer_denoiser``): None when
    there is none, ``frame`` when it is ``frame`` itself, True when it is one of its callers. A code is a denoiser's
    forward when named ``forward`` in a module whose ``__name__`` starts with one of ``prefixes``; decided once per
    code (kept in a co_extra slot). The interpreter's frames are read in place: no frame object made per caller."""


def outer_setup(probes_globals: dict[str, Any] | None, scope_var: ContextVar[Any] = ..., finished: Any = ...,
                noted: dict[int, Any] = ..., max_noted: int = ..., start_listeners: list[Any] = ...,
                prefixes: tuple[str, ...] = ..., page: int = ..., /) -> None:
    """Have the outermost calls of denoisers' ``forward`` (code kind 2) recorded in C (record/native/outer.c:
    ``tracing.recorder.outer_in_c``): the module globals of ``tracing.probes`` (its ``span_memory``), the step scope's
    ContextVar (``steps.hooks._scope``), ``spans.buffer.finished``, the denoiser modules noted
    (``steps.workfacts._denoisers``) and their limit, ``steps.hooks._start_listeners``, the denoiser modules'
    prefixes and the page size (bytes). ``outer_setup(None)``: every such call on its Python probe again."""


def read_held(fd: int, n: int, offset: int = -1, /) -> bytes:
    """``read(2)`` (``offset`` < 0) or ``pread(2)`` of at most ``n`` bytes (0 to 65,536) with the GIL kept: for the
    recorder thread's reads of a few bytes that never block (``/proc/self/statm``, a non-blocking pipe), which
    ``os.read``/``os.pread`` would make a GIL hand-over to a busy thread. b"" when nothing is there (EAGAIN). Raises
    OSError, ValueError (``n``)."""


def thread_hooked(ident: int, /) -> bool:
    """Whether the thread of ``ident`` (``threading.get_ident``) has a ``setprofile``/``settrace`` function of its
    own, which Python shows to that thread alone; False when no thread has that ident. Raises OverflowError,
    TypeError (``ident``)."""


def tick(signum: int, frame: FrameType | None, /) -> None:
    """The handler installed for the main thread's two timer signals (``sampling.signals``; sigtick.c): serves the
    active ``Tick`` (a wall tick: the schedule's charges, a sample of ``frame``'s stack into the walker's rows, the
    rest rule, the memory lane; a CPU tick: the CPU time since the previous one), or calls the fallback while none
    is active. Raises what a Python callout (``rest``, ``wake``, ``MemoryLane.sample``) raises."""


def set_tick(tick: Tick | None, fallback: Callable[..., Any] | None = None, /) -> None:
    """The ``Tick`` that ``tick`` serves (None: none; its pid is taken now: a forked child's ticks do nothing), and
    the Python handler called while none is. Raises TypeError."""


class Tick:
    """The main thread's timer-signal sampling state (``sampling.signals.MainThreadSampler``'s fields, which it reads
    and writes through properties), driven by ``tick``. Times are ``CLOCK_MONOTONIC`` ns (``time.perf_counter_ns``
    on Linux), CPU times the main thread's CPU clock in ns."""

    active: bool
    resting: bool
    missed: bool
    due: int
    waited: int
    interval: int
    left: int
    carry: int
    period_ns: int
    rest_cpu: int
    tick_t: int
    tick_cpu: int
    tick_cpu_q: int
    quiet_ticks: int
    quiet_cpu: int
    cpu_last: int
    #: when ``cpu_last`` was read (ns; 0: not yet): a resting main thread whose CPU period took over 100 times as long
    #: in wall time stays resting
    cpu_last_t: int
    #: samples recorded by ``tick``
    samples: Final[int]
    current: Any
    memory: Any

    def bind(self, owner: Any, walker: Walker, thread_id: int, wall_signal: int, cpu_signal: int, span_var: Any,
             seed: int, /) -> None:
        """What ``tick`` reads and calls: the ``MainThreadSampler`` (its ``rest``, ``wake``, ``paused``), the walker
        whose rows take the samples, the main thread's ident, the two signals, the open-span ContextVar, the
        schedule's random seed (64 bits)."""

    def unbind(self) -> None:
        """Release what ``bind`` took; inactive from now on."""

    def set_timer(self, which: int, timer_id: int | None, /) -> None:
        """The kernel timer (``ThreadTimer.timer_id``) of the wall (0) or CPU (1) timer; None: none (before it is
        deleted). Raises ValueError (``which``)."""


def dropped() -> int:
    """How many finished calls were dropped because ``max_pending`` were waiting."""


def clear() -> None:
    """Drop the finished calls and this thread's open ones (a forked child that records nothing)."""


def open_spans(thread_id: int, /) -> list[tuple[int, int | None, str, str, int]]:
    """The open native calls of thread ``thread_id``, outermost first, as (span id, parent id, name, op, start ns)."""


def call_wake(timer_id: int, /) -> int:
    """The next traced call to start (a C-recorded one) arms POSIX timer ``timer_id`` to expire at once, waking a
    resting recorder thread (``cpuwake.CpuWake``), once; -1: no call does. Returns how many calls woke one so far."""


def own_signal(signum: int, /) -> None:
    """Install the C handler of signal ``signum`` (a real-time one, SA_RESTART) for the busy threads' own timers (``Walker.run`` arms them: ownclock.c), or with 0 uninstall it (SIG_IGN, then SIG_DFL: a signal still
    queued is dropped). Raises OSError (sigaction; not Linux)."""


def last_call_wake() -> tuple[int, int] | None:
    """``(t_ns, thread id)``: when (``CLOCK_MONOTONIC`` ns, before that span's start) and in which thread the last
    span that woke a resting recorder (``call_wake``) started; None when none has. That thread ran from then on: a
    wait the recorder charges it after its rest ends there."""


def open_calls() -> int:
    """How many native calls are open now, every thread's (the recorder rests early only outside any)."""


def mon_start(code: CodeType, offset: int, /) -> object:
    """``sys.monitoring`` PY_START callback (returns ``DISABLE`` for an untraced code)."""


def mon_resume(code: CodeType, offset: int, /) -> object:
    """``sys.monitoring`` PY_RESUME callback."""


def mon_return(code: CodeType, offset: int, retval: object, /) -> object:
    """``sys.monitoring`` PY_RETURN callback."""


def mon_yield(code: CodeType, offset: int, retval: object, /) -> object:
    """``sys.monitoring`` PY_YIELD callback."""


def mon_throw(code: CodeType, offset: int, exc: BaseException, /) -> object:
    """``sys.monitoring`` PY_THROW callback (a global event)."""


def mon_unwind(code: CodeType, offset: int, exc: BaseException, /) -> object:
    """``sys.monitoring`` PY_UNWIND callback (a global event)."""


class Probe:
    """The calls of one traced plain function from Python 3.11's instrumented code (``tracing.codeswap``)."""

    #: its code index (``register``)
    index: Final[int]

    def __init__(self, index: int, /) -> None: ...

    def enter(self) -> None:
        """The call starts (pushed on this thread's stack)."""

    def error(self) -> None:
        """The call is ending by the exception being handled (its type noted)."""

    def exit(self) -> None:
        """The call ends: one finished record."""


class DenoiserProbe:
    """A denoiser forward's calls from 3.11's instrumented code: a call inside an open denoiser call is recorded
    in C with that call's step, any other goes to ``probe`` (the Python probe's ``enter``/``error``/``exit``)."""

    #: its code index (``register`` with kind 2)
    index: Final[int]

    def __init__(self, index: int, probe: object, /) -> None: ...

    def enter(self) -> None:
        """The call starts."""

    def error(self) -> None:
        """The call is ending by the exception being handled."""

    def exit(self) -> None:
        """The call ends."""


class Walker:
    """The sampler's stack walk (stackwalk.c; CPython 3.11 to 3.13 with the GIL, absent elsewhere): every thread's
    Python stack read from its interpreter frames without making a frame object, kept in the walker's own tables
    (``sampling.sampler.Sampler`` resolves what is new once). A frame is one (code, line); a stack is the frame
    indices of a thread's frames, leaf first, frames of ``hidden_files`` left out and the ``max_depth`` nearest the
    leaf kept. Each code object seen is kept (a strong reference) until ``reset``, so its address is never reused
    meanwhile. Called with the GIL held; runs no Python code while it walks."""

    #: frames kept a stack, nearest the leaf
    max_depth: Final[int]
    #: walks that stopped at ``max_depth`` with a frame left above (their root side left out)
    truncated: Final[int]
    #: frames and stacks made since the last ``take`` (0: ``take`` has nothing to hand over)
    unseen: Final[int]
    #: code objects held (strong references), whose frames a look without the GIL and a busy thread's own timer can
    #: read; those of the process's previous walker, freed before this one was made, are held from the start
    codes: Final[int]
    #: the stack index of the main thread's last walk (``walk``, or a sample of the C signal handler ``tick``), -1
    last_walk: Final[int]
    #: threads the last ``sample`` walked within their slack (their CPU clock moved; not in its ran list)
    moved: Final[int]
    #: ``run``'s looks so far (the last run's once it ended) at which no thread's CPU clock had moved since the run's
    #: last full look: made without the GIL, recording no row (each thread's next row is charged the time since)
    quiet_looks: Final[int]
    #: ``run``'s looks, all runs, that read a busy thread's stack without the GIL (remote.c: while that thread does
    #: not hold the GIL, through ``process_vm_readv``, its sample accounted at the next hold of the GIL)
    remote_looks: Final[int]
    #: threads such a look could not read (held the GIL 200 us, ran meanwhile, a code not held yet): read with it
    remote_misses: Final[int]
    #: whether ``run`` may read a busy thread's stack without the GIL (True by default; False: every look takes it)
    remote_on: bool
    #: whether ``run`` may leave a thread that runs all the time to a timer of its own, whose signal
    #: handler reads its stack in the thread (ownclock.c; True by default; needs ``own_signal``)
    own_on: bool
    #: times such a timer was armed, all runs
    own_threads: Final[int]
    #: the samples those handlers took, accounted so far (each charged as a look's sample of that thread)
    own_samples: Final[int]
    #: signals whose handler could not read the stack (a code the walker does not hold yet, a full ring)
    own_misses: Final[int]
    #: the time (ns) those handlers took in their threads, as accounted so far
    own_ns: Final[int]
    #: those timers' period (ns; the overhead budget lowers their rate: ``Budget``), 0: the looks' period (their
    #: period is never shorter than that)
    own_period: int
    #: threads the last ``sample(lazy=True)`` left without a row (not run since the last look, or back at the stack
    #: of their last row: their next row is charged the time and the CPU since that one)
    deferred: Final[int]
    #: sample rows waiting for ``rows``
    n_rows: Final[int]

    def __init__(self, max_depth: int, hidden_files: frozenset[str], /) -> None: ...

    def look(self, skip: Iterable[int], /) -> dict[int, int]:
        """One look at every thread of this interpreter that has a Python frame (``sys._current_frames``'s
        threads, in its order): thread id -> its stack index, or -1 for a thread of ``skip`` (not walked). A stack
        seen before costs a hash lookup; a new one is kept for ``take``. 0.5 to 0.9 us a busy thread 30 frames deep
        (its frames in another core's cache), 0.4 us a parked one."""

    def walk(self, frame: FrameType, /) -> int:
        """The stack index of ``frame`` and its callers, read as ``look`` reads a thread's (the main thread's
        signal handler, from the interrupted frame: no frame object made for its callers); the empty stack's index
        when none of them is shown. Raises TypeError when ``frame`` is no frame object."""

    def sample(self, skip: Iterable[int], period_ns: int, cap_ns: int, lazy: bool = False, /
               ) -> tuple[list[int], list[int], int]:
        """One look with each thread's accounting (threads.c; ``Sampler.sample``'s rules): every thread with a Python
        frame but those of ``skip`` gets a sample row. A thread whose CPU clock has not moved since its previous
        sample (or by no more than its slack) is recorded again on its previous stack, unwalked, charged the time
        since; another is walked and charged the time since (at most ``cap_ns``; a first sample ``period_ns``) and the
        CPU time it used (-1: unknown), a long wait before its run charged at its previous stack. Threads that ended
        are forgotten (one found still by ``unmoved`` or a lazy look is charged at its stack until then). ``lazy``
        (a resting recorder's look): a thread not run since the last look, or back at the stack of its last row,
        gets no row (``deferred``: its next row is charged the time and the CPU since). Returns ``(seen, ran, n)``:
        the ids of the threads with a Python frame, of those walked, and how many were sampled."""

    def blocked(self, skip: Iterable[int], /) -> int:
        """When no thread read before (but ``skip``'s) has run since (its CPU clock), each is recorded again on its
        previous stack, charged the time since, and their count returned; else -1 and nothing recorded."""

    def unmoved(self, skip: Iterable[int], /) -> int:
        """How many threads read before (but ``skip``'s) when none has run since (its CPU clock), else -1; nothing
        recorded either way (each one's next row is charged the whole time since its previous one)."""

    def idle(self, t_ns: int, ran: bool, /) -> bool:
        """Whether the last ``sample`` counts as idle at ``t_ns``: nothing ran (``ran`` False: the allowance only
        refills) or what its walked threads used since the previous look is within an allowance of CPU that refills
        at 1% of the time passed, up to 1 ms or 1% of the time since the previous call (walker.h IDLE_SHARE,
        IDLE_CAP_NS); spent, and emptied when it does not cover a look."""

    def hand_over(self, tid: int, native_id: int, t_ns: int, cpu_ns: int, stack: int, slack_ns: int, /) -> None:
        """``sample`` reads ``tid`` from now on, its previous sample at ``t_ns`` with its CPU clock at ``cpu_ns`` on
        walker stack ``stack`` (-1: none); ``slack_ns``: CPU it may use and still count as not run."""

    def forget(self, tid: int | None, whole: bool = True, /) -> tuple[int, int, int] | None:
        """``tid``'s previous sample ``(t_ns, cpu_ns, stack)`` dropped and returned (None: none); ``whole``: its slack
        too; ``tid`` None: every thread's (returns None)."""

    def rows(self) -> list[tuple[int, int, int, int, int]]:
        """The sample rows recorded since the last call, ``(t_ns, thread id, walker stack index, wall_ns, cpu_ns)``."""

    def run(self, lock: Any, sample_lock: Any, skip: Iterable[int], period_ns: int, cap_ns: int, next_t: int, until_ns: int,
            main_ident: int, main_state: Any, active: dict[int, Any], stop_fd: int, stop_sigs: bytes, finished: Any, limit: int,
            mem: Any, rss_fd: int, page: int, mem_every: int, quiet: int, quiet_ns: int, /
            ) -> tuple[int, int, int, int, list[int] | None, list[int] | None, int, bytes, int]:
        """The recorder's looks until something else is due, in one call (looks.c; ``Sampler.run_looks``): waits for each
        look without the GIL (``notify`` ends the wait; ``lock``, released, ends the run: reason 1), looks as ``sample`` does (each thread's CPU clock read before the GIL is taken) from
        ``next_t`` on every ``period_ns`` (ns, ``CLOCK_MONOTONIC``) with ``sample_lock`` held (a look that finds it
        held is skipped), and reads the memory lane's RSS (``mem``, a
        ``MemoryLane``; the pread of ``rss_fd``, ``page`` bytes a page) when ``mem.last_t`` is ``mem_every`` ns old.
        The main thread (``main_ident``) is looked at unless ``main_state`` (its timer sampler's state: ``active``,
        ``resting``; None: no timer sampler) says its own timers sample it; that state is read again at each look,
        with the GIL held. While the main thread is looked at here, a look at which no thread's CPU clock moved since
        the run's last full look is a quiet look, without the GIL and recording nothing (``quiet_looks``: counted in
        ``looks``; ``ran`` is [] when the last look was one); a look at which only threads other than the main one
        moved reads each of them without the GIL once it does not hold it (``remote_looks``; remote.c), its samples
        accounted at the next hold of the GIL, within 250 ms. Returns ``(reason, looks, threads looked at, next_t,
        seen, ran, look CPU ns, stop
        bytes, quiet)``: reason 0 ``until_ns``, 1 woken, 2 looks in a row where nothing ran or moved covering ``quiet_ns``
        (``quiet``: the ns such looks covered, ``period_ns`` each, counted from the ``quiet`` given), 3 the resting main thread ran, 4
        ``active`` changed size, 5 a stop signal's byte read from ``stop_fd`` (among ``stop_sigs``; returned), 6
        ``finished`` plus the C recorder's finished calls reached ``limit``, 7 a profiler or tracer of the program's
        is active, 8 ``main_state`` changed. Raises ValueError
        (``period_ns``), what ``lock.acquire`` or the memory lane's calls raise."""

    def lane(self, lock: Any, until_ns: int, mem: Any, rss_fd: int, page: int, period_ns: int, stop_fd: int,
             stop_sigs: bytes, finished: Any, limit: int, /) -> tuple[int, int, bytes]:
        """The memory lane alone while sampling is off (looks.c; ``Sampler.run_lane``): the RSS read every
        ``period_ns`` from ``mem.last_t`` (``CLOCK_MONOTONIC`` ns) without the GIL, the rows kept until ``until_ns`` or
        anything else is due (``notify``; ``lock`` found released at the call: 1; a stop signal on ``stop_fd``: 5;
        ``limit`` finished spans waiting: 6; a profiler of the program's at the call: 7; 1,024 rows: 9), then appended
        to ``mem`` as ``MemoryLane.sample`` does. Returns ``(reason, rows, stop_bytes)``. Raises ValueError
        (``period_ns`` <= 0, ``rss_fd`` < 0)."""

    def notify(self) -> None:
        """Wake a ``run`` that waits for its next look (its eventfd; any thread)."""

    def own_stop(self) -> None:
        """Delete the busy threads' own timers if this walker armed them (a handler running meanwhile
        waited for); ``run`` arms them again."""

    def take(self) -> tuple[list[tuple[CodeType, int, str]], list[tuple[int, ...]]]:
        """The frames and stacks made since the last take, in index order: frames as ``(code, line, module)`` (line
        -1: none, as ``f_lineno`` None; module: the ``__name__`` of the globals of the first frame seen running the
        code, "" when not a str), stacks as tuples of frame indices, leaf first."""

    def reset(self, carry: bool = False, /) -> None:
        """Forget every code (released: their addresses may be reused), frame and stack; indices start again at 0.
        ``carry``: the codes are held for the process's next walker made instead (a session's end: the next
        session's looks and busy threads' own timers read its threads' frames from the first look, not after
        learning each code again from a miss); a walker freed carries its codes too."""
