"""Memory on the run's clock: the process's resident set (RSS) and, on CUDA, the caching allocator's bytes.

What is read, and how cheaply (stdlib only; torch is never imported, only looked up in ``sys.modules``):

- **RSS**: ``/proc/self/statm`` (proc(5): sizes in pages; the second field is the resident set), read with one
  ``os.pread`` of a file descriptor opened once: about 2 us. Linux only; elsewhere the lane is empty.
- **peak RSS**: the kernel's high-water mark of the resident set (``getrusage``'s ``ru_maxrss``: ``VmHWM``;
  never reset by stepscope: resetting it through ``clear_refs`` would change what the program reads), read at
  the entry and exit of step-level spans only (about 1 us).
- **CUDA** (only once the program has imported torch *and* initialised CUDA: ``torch.cuda.is_initialized()``):
  allocated and reserved bytes of the current device and the allocator's peak, from one
  ``torch._C._cuda_memoryStats(device)`` call (the nested dict behind ``torch.cuda.memory_stats``; the public
  function is used where the private one is missing). Sampled at most ``CUDA_HZ`` times a second.

Samples: ``sample(t_ns)`` is called by the main thread's wall-timer handler (``sampling.signals``: a few
microseconds in a tick that is there anyway, no wake-up of its own), and by the recorder thread when the main
thread is not sampled by signal or its handler could not run for two periods (a long C call holding the main
thread: the recorder's wake-ups fill that gap); each is ``(t_ns, rss_bytes, cuda_allocated, cuda_reserved)``
with -1 for "not read". They wait in a bounded deque until the recorder's flush.

Per span (``SpanMemory``, called by ``tracing.probes`` for probes with hooks: pipeline calls, denoiser
forwards, scheduler steps, mirrored spans; not for those nested in a denoiser's span, ``probes._in_measured``): RSS and CUDA bytes at entry and exit, written into the span's
``attrs`` (an entry within 2 ms of the thread's previous step-level span's exit takes that exit's readings, the
gap counted in this span: ``_native.readings``; ``memory.rss_in``, ``memory.rss_out``, ``memory.rss_peak`` when the kernel's high-water mark rose
inside the span, so that the peak is exact; ``memory.cuda_in``, ``memory.cuda_out``, ``memory.cuda_peak``,
``memory.cuda_peak_exact``; and the thread's wait for a CPU, ``cpu.wait_in``: its counter at entry, ns, and
``cpu.wait_ns``: the wait inside the span, ``steps.cpuwait``). The CUDA peak of a span is exact when the allocator's peak rose inside it (a
new high of the run); otherwise it is only bounded by the samples. ``cuda_peaks="reset"`` resets the
allocator's peak counter at every step-level span's entry (``torch.cuda.reset_peak_memory_stats``) for an
exact peak per span, nested spans kept right by a stack of running maxima; it changes what the program's own
``torch.cuda.max_memory_allocated()`` reads, so it is not the default.

``--memory-history`` (``start_history``): CUDA's ``torch.cuda.memory._record_memory_history`` with a bounded
ring buffer (``max_entries``), turned on when the program imports torch with CUDA available, and a snapshot
(``torch.cuda.memory._snapshot()``) written to the run's folder when an out-of-memory error is seen
(``torch._C._cuda_attach_out_of_memory_observer``, else when the error reaches the top).
"""

from __future__ import annotations

import os
import sys
from collections import deque

from ...core.steprules import WAIT_IN, WAIT_NS

#: The CUDA allocator's stats are read at most this often by the sampler (times a second).
CUDA_HZ = 20
#: Memory samples waiting for the recorder's flush (one second's worth at 10 kHz, with margin).
MAX_PENDING = 100_000

try:
    PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):
    PAGE = 4096

_pread = getattr(os, "pread", None)
try:
    import resource as _resource

    _getrusage, _RUSAGE_SELF = _resource.getrusage, _resource.RUSAGE_SELF
except ImportError:  # not POSIX
    _getrusage = _RUSAGE_SELF = None


class RssReader:
    """The process's RSS in bytes from ``/proc/self/statm``; ``read()`` is -1 where it cannot be read."""

    __slots__ = ("fd", "status_fd", "pid", "_read")

    def __init__(self) -> None:
        from .. import native

        self.fd = self.status_fd = -1
        self.pid = os.getpid()
        # (the extension's read keeps the GIL: os.pread hands it to a busy thread, which the recorder waits for)
        self._read = getattr(native.ext, "read_held", None) or _pread
        if _pread is None or not sys.platform.startswith("linux"):
            return
        try:
            self.fd = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            self.close()

    def read(self) -> int:
        """Resident set size (bytes), or -1."""
        if self.fd < 0:
            return -1
        try:
            b = self._read(self.fd, 96, 0)
            i = b.index(b" ")
            return int(b[i + 1:b.index(b" ", i + 1)]) * PAGE
        except (OSError, ValueError):
            return -1

    def peak(self) -> int:
        """The kernel's high-water mark of the RSS (bytes), or -1: ``getrusage(RUSAGE_SELF).ru_maxrss`` (KiB on
        Linux; the larger of the process's ``VmHWM`` and that of the image it was exec'd from), one system
        call (``/proc/self/status`` would cost ten times more: the kernel formats the whole file)."""
        if self.fd < 0 or _getrusage is None:
            return -1
        try:
            return _getrusage(_RUSAGE_SELF).ru_maxrss * 1024
        except (OSError, ValueError):
            return -1

    def close(self) -> None:
        for fd in (self.fd, self.status_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fd = self.status_fd = -1


class CudaReader:
    """The CUDA caching allocator's figures of the current device, once the program has initialised CUDA.

    ``read()`` -> ``(allocated, reserved, peak allocated)`` bytes, or None (no torch, CUDA not initialised,
    or the call failed). Never imports torch and never initialises CUDA."""

    __slots__ = ("_stats", "_device", "_checked_torch", "failed", "_cuda")

    def __init__(self) -> None:
        self._stats = None
        self._device = None
        self._checked_torch = None
        self.failed = False
        self._cuda = None  # torch.cuda, once torch is imported

    def _ready(self) -> bool:
        if self._stats is not None:
            return True
        if self.failed:
            return False
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        cuda = self._cuda
        if cuda is None:
            cuda = self._cuda = getattr(torch, "cuda", None)
            if cuda is None:
                return False
        try:  # (``_initialized``, read first: a step-level span asks twice a step on a machine without CUDA)
            if not getattr(cuda, "_initialized", True) or not cuda.is_initialized():
                return False
        except Exception:
            return False
        raw = getattr(getattr(torch, "_C", None), "_cuda_memoryStats", None)
        if raw is not None:
            def stats():
                d = raw(cuda.current_device())
                a, r = d["allocated_bytes"]["all"], d["reserved_bytes"]["all"]
                return int(a["current"]), int(r["current"]), int(a["peak"])
        else:
            def stats():
                d = cuda.memory_stats()
                return (int(d.get("allocated_bytes.all.current", 0)), int(d.get("reserved_bytes.all.current", 0)),
                        int(d.get("allocated_bytes.all.peak", 0)))
        self._stats = stats
        return True

    def ready(self) -> bool:
        """Whether ``read`` would read CUDA's figures now (the program has initialised CUDA)."""
        try:
            return self._ready()
        except Exception:
            return False

    def read(self):
        try:
            if not self._ready():
                return None
            return self._stats()
        except Exception:
            self.failed = True
            self._stats = None
            return None

    def reset_peak(self) -> None:
        """``torch.cuda.reset_peak_memory_stats()`` of the current device (only in ``cuda_peaks="reset"``)."""
        torch = sys.modules.get("torch")
        try:
            torch.cuda.reset_peak_memory_stats()
        except Exception:
            pass


class MemoryLane:
    """The run's memory samples. ``sample(t_ns)`` from the recorder thread; ``drain()`` at each flush returns
    ``[(t_ns, rss, cuda_allocated, cuda_reserved)]`` (-1: not read)."""

    def __init__(self) -> None:
        self.rss = RssReader()
        self.cuda = CudaReader()
        self.pending: deque = deque(maxlen=MAX_PENDING)
        self._cuda_every = 1_000_000_000 // CUDA_HZ
        self._cuda_next = 0
        self.last: tuple | None = None
        self.last_t = 0  # when the last sample was taken (clock ns)
        self.count = 0

    def sample(self, t_ns: int) -> None:
        rss = self.rss.read()
        alloc = reserved = -1
        if t_ns >= self._cuda_next:
            self._cuda_next = t_ns + self._cuda_every
            c = self.cuda.read()
            if c is not None:
                alloc, reserved = c[0], c[1]
        row = (t_ns, rss, alloc, reserved)
        self.pending.append(row)
        self.last = row
        self.last_t = t_ns
        self.count += 1

    def drain(self) -> list[tuple]:
        """Remove and return the pending samples, oldest first (pops exactly what it returns)."""
        pop = self.pending.popleft
        return [pop() for _ in range(len(self.pending))]

    def close(self) -> None:
        self.rss.close()


class SpanMemory:
    """Memory at the entry and exit of step-level spans (see the module doc), written into their attrs.

    ``cuda_peaks``: "safe" (default: never reset the allocator's peak) or "reset"."""

    def __init__(self, lane: MemoryLane, cuda_peaks: str = "safe") -> None:
        from ..steps.cpuwait import RunDelay

        self.rss = lane.rss
        self.cuda = lane.cuda
        self.reset = cuda_peaks == "reset"
        from .. import native

        self._stack: list[list[int]] = []  # reset mode: running maxima of the open spans
        #: the thread's wait for a CPU (``steps.cpuwait``), read with the memory at entry and exit
        self.run_delay = RunDelay()
        #: the RSS, its high-water mark and the thread's CPU wait in one C call (``_native.readings``), or None: three
        #: system calls still, but on a cache cooled by a denoising step 31 us where the Python reads took 69 us
        self._readings = getattr(native.ext, "readings", None)

    def close(self) -> None:
        """Close the CPU-wait reader's files (no longer ``steps.cpuwait.current``)."""
        from ..steps import cpuwait

        cpuwait.release(self.run_delay)
        self.run_delay.close()

    def enter(self, attrs: dict | None) -> dict:
        """Read memory now into ``attrs`` (a new dict when None); returns it."""
        return self.merge(attrs, self.read_in())

    @staticmethod
    def merge(attrs: dict | None, readings: dict) -> dict:
        """``attrs`` with the entry ``readings`` of ``read_in`` (a new dict when ``attrs`` is None)."""
        if attrs is None:
            return readings
        attrs.update(readings)
        return attrs

    def read_in(self) -> dict:
        """The entry readings, as attrs (read before the span's hooks run and its start is taken, so that the
        reads are not inside a mirrored range or the span's time)."""
        a: dict = {}
        if self._readings is not None:
            rss, hwm, w = self._readings(self.rss.fd, PAGE, self.run_delay.fd(), True)
            if w < 0:
                w = self.run_delay.read()  # (a descriptor of an ended thread whose id came back: opened anew)
            if w >= 0:
                a[WAIT_IN] = w
            if rss >= 0:
                a["memory.rss_in"] = rss
                a["_memory.hwm"] = hwm
        else:
            self.run_delay.enter(a)
            rss = self.rss.read()
            if rss >= 0:
                a["memory.rss_in"] = rss
                a["_memory.hwm"] = self.rss.peak()
        c = self.cuda.read()
        if c is not None:
            a["memory.cuda_in"] = c[0]
            a["_memory.cuda_hwm"] = c[2]
            if self.reset:
                if self._stack:  # the peak so far belongs to the enclosing span too
                    self._stack[-1][0] = max(self._stack[-1][0], c[2])
                self.cuda.reset_peak()
                self._stack.append([c[0]])
        return a

    def exit(self, attrs: dict) -> None:
        """Read memory now into the span's ``attrs`` (before its end is taken)."""
        if self._readings is not None:
            w0, has_rss = attrs.get(WAIT_IN), "memory.rss_in" in attrs
            rss, hwm, w = self._readings(self.rss.fd if has_rss else -1, PAGE,
                                         self.run_delay.fd() if w0 is not None else -1)
            if w0 is not None:
                if w < 0:
                    w = self.run_delay.read()
                if w >= w0:  # (not when it went back: another thread's counter, a generator resumed elsewhere)
                    attrs[WAIT_NS] = w - w0
        else:
            self.run_delay.exit(attrs)
            has_rss = "memory.rss_in" in attrs
            if has_rss:
                rss, hwm = self.rss.read(), self.rss.peak()
        if has_rss:
            attrs["memory.rss_out"] = rss
            hwm0 = attrs.pop("_memory.hwm", -1)
            if hwm0 >= 0 and hwm > hwm0:  # a new high of the process inside this span: its exact peak
                attrs["memory.rss_peak"] = hwm
        if "memory.cuda_in" not in attrs:
            attrs.pop("_memory.cuda_hwm", None)
            return
        c = self.cuda.read()
        peak0 = attrs.pop("_memory.cuda_hwm", -1)
        if c is None:
            return
        attrs["memory.cuda_out"] = c[0]
        if self.reset and self._stack:
            own = max(self._stack.pop()[0], c[2])
            if self._stack:
                self._stack[-1][0] = max(self._stack[-1][0], own)
            attrs["memory.cuda_peak"] = own
            attrs["memory.cuda_peak_exact"] = True
        elif c[2] > peak0:
            attrs["memory.cuda_peak"] = c[2]
            attrs["memory.cuda_peak_exact"] = True
        else:  # no new high: the span's peak is at most the earlier one; the samples bound it
            attrs["memory.cuda_peak"] = max(attrs["memory.cuda_in"], c[0])
            attrs["memory.cuda_peak_exact"] = False


def read_now() -> dict:
    """Memory now, for a run's record (OOM forensics): ``{"rss", "rss_peak", "cuda_allocated",
    "cuda_reserved", "cuda_peak"}`` in bytes, keys present where known. Never imports torch."""
    r = RssReader()
    out = {}
    try:
        v = r.read()
        if v >= 0:
            out["rss"] = v
        v = r.peak()
        if v >= 0:
            out["rss_peak"] = v
    finally:
        r.close()
    c = CudaReader().read()
    if c is not None:
        out["cuda_allocated"], out["cuda_reserved"], out["cuda_peak"] = c
    return out


# -- out-of-memory errors and CUDA's memory history ------------------------------------------------------------

#: Messages of a RuntimeError that mean the CPU allocator could not allocate (torch's DefaultCPUAllocator).
OOM_MESSAGES = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory",
                "CUDA out of memory", "out of memory")


def proc_bytes(path: str, field: str) -> int | None:
    """A ``kB`` field of a ``/proc`` file as bytes (``proc_bytes("/proc/self/status", "VmHWM")``,
    ``proc_bytes("/proc/meminfo", "MemAvailable")``), or None where it cannot be read (not Linux)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory error: ``torch.OutOfMemoryError`` (any class of that name, so also
    one raised deliberately on the CPU), Python's ``MemoryError``, or a RuntimeError with the allocator's
    out-of-memory message."""
    for t in type(exc).__mro__:
        if t.__name__ in ("OutOfMemoryError", "MemoryError"):
            return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return any(m in text for m in OOM_MESSAGES)
    return False


class History:
    """CUDA's allocator history (``--memory-history``): ``_record_memory_history`` with at most
    ``max_entries`` events kept (a ring buffer), Python stacks of each allocation; ``snapshot(path)``
    pickles ``torch.cuda.memory._snapshot()`` (the format memory_viz reads) once."""

    def __init__(self, path, max_entries: int = 100_000) -> None:
        self.path = path  # where the snapshot goes: the run's ``MEMORY_SNAPSHOT`` (``Store.run_file``)
        self.max_entries = max_entries
        self.on = False
        self.note: str | None = None
        self.written = None
        self.summary: dict | None = None  # ``memory.snapshot.summarize`` of the snapshot written

    def start(self, torch) -> None:
        """Turn the history on (called when the program imports torch); a CPU-only torch: a note, nothing on."""
        try:
            if not torch.cuda.is_available():
                self.note = "--memory-history: no CUDA device (the allocator history is CUDA's)"
                return
            torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                                     max_entries=self.max_entries)
            self.on = True
        except Exception as e:
            self.note = f"--memory-history: could not start ({type(e).__name__}: {e})"
            return
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            def observer(device, alloc, device_allocated, device_free):
                self.snapshot("oom")

            try:
                attach(observer)
            except Exception:
                pass

    def snapshot(self, why: str = "oom"):
        """Write the snapshot (``memory_snapshot.pickle`` in the run's folder) to ``path`` (once); its path, or None."""
        if not self.on or self.written is not None:
            return self.written
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        try:
            import pickle

            snap = torch.cuda.memory._snapshot()
            path = str(self.path)
            with open(path, "wb") as f:
                pickle.dump(snap, f)
            self.written = path
            from .snapshot import summarize

            self.summary = summarize(snap)
        except Exception as e:
            self.note = f"--memory-history: snapshot failed ({type(e).__name__}: {e})"
        return self.written

    def stop(self) -> None:
        if not self.on:
            return
        torch = sys.modules.get("torch")
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
        self.on = False


# -- the run's memory facts -------------------------------------------------------------------------------------

def oom_record(exc: BaseException, history: History | None = None) -> dict:
    """The record of the out-of-memory error ``exc`` the program is ending by (``is_oom``), for ``env["memory"]
    ["oom"]``: ``error`` (its type, qualified outside builtins), ``message`` (its first line, at most 500
    characters), ``t_ns`` (the run's clock) and memory now (``read_now``: bytes). With ``history`` (``--memory-
    history``), the allocator snapshot is written first and the history turned off."""
    from ...core import clock

    t = type(exc)
    now = read_now()
    rec = {"error": (t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"),
           "message": str(exc).splitlines()[0][:500] if str(exc) else "", "t_ns": clock.now_ns(), **now}
    if history is not None:
        history.snapshot("oom")
        history.stop()
    return rec


def run_facts(lane: MemoryLane | None, history: History | None, oom: dict | None, cuda_peaks: str) -> dict:
    """A run's memory facts for ``env["memory"]``: with the lane, ``peak_rss`` (the kernel's high-water mark),
    CUDA's ``cuda_peak``/``cuda_allocated``/``cuda_reserved`` (once CUDA was initialised), all bytes, ``samples``
    (memory samples taken) and ``cuda_peaks`` (the per-span peak mode); the OOM record ``oom`` (``oom_record``); and
    ``--memory-history``'s ``history`` (the snapshot's file name), ``history_summary`` or ``history_note``."""
    out: dict = {}
    if lane is not None:
        now = read_now()
        if "rss_peak" in now:
            out["peak_rss"] = now["rss_peak"]
        for k in ("cuda_peak", "cuda_allocated", "cuda_reserved"):
            if k in now:
                out[k] = now[k]
        out["samples"] = lane.count
        out["cuda_peaks"] = cuda_peaks
    if oom:
        out["oom"] = oom
    if history is not None:
        if history.written:
            out["history"] = os.path.basename(history.written)
        if history.summary:
            out["history_summary"] = history.summary
        if history.note:
            out["history_note"] = history.note
    return out
