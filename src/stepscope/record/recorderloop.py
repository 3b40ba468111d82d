"""The recorder thread's loop (``Session._record_loop``), a part of ``session.Session``: it samples every thread at
``profiles_hz`` (the other threads' rate under the overhead budget: ``sampling.budget``; the main thread by its own
timer signals while it runs, by this loop while it rests: ``sampling.signals``), reads the memory lane, writes what
waits every ``flush_interval_s`` (or once ``FLUSH_SPANS`` spans wait), and rests when nothing runs (``cpuwake``). With
the C stack walk, its steady state is one C call (``Sampler.run_looks``: ``Walker.run``, record/native/looks.c).
Stdlib only: this module runs inside the profiled program."""

from __future__ import annotations

import os
import threading

from ..core import clock
from .sampling.budget import WINDOW_NS, Budget
from .sampling.cpuwake import IDLE_LOOK_NS, CpuWake, park
from .sampling.owntimers import OwnTimers
from .sampling.sampler import OWN_THREADS, keep_signals_off_this_thread
from .sampling.signals import MEMORY_PERIOD_MIN_NS, REST_NS
from .spans import buffer
from . import native


#: The recorder writes as soon as this many finished spans wait, not only once a flush interval: a program that
#: ends a million spans a second then never holds them all (~250 bytes each as tuples), and the end of its run
#: writes at most a block or a few (``store.spanblock``).
FLUSH_SPANS = 131_072

#: After looks covering this long (ns) at which no thread but the main one had run (the sampler thread's), the recorder
#: looks at 10 Hz, or rests (``cpuwake``); a shorter wait (a worker's sleep inside a step) keeps the full rate
QUIET_NS = 1_000_000_000

#: ... and while the recorder samples every thread (the main one resting, or without timers of its own), after looks
#: covering this long (ns) at which no thread had run it rests (``cpuwake``: woken by the process's CPU time), looking
#: again only each time the quiet time grew by ``REST_GROWTH``; inside a traced call (a step) it keeps the full rate for
#: ``QUIET_NS`` as before (``in_traced_call``): a thread's move between two waits there is charged exactly, and in its step
REST_QUIET_NS = 100_000_000

#: A resting recorder looks again (its CPU timer aside) once the time since anything last ran has grown by this
#: fraction: each look costs a wake-up, and the stacks of threads that moved from one wait to another within the
#: CPU timer's period are read within a quarter of the quiet time before (their new wait's start charged to the old
#: one until then, as a sampler at that interval would)
REST_GROWTH = 0.25



def in_traced_call(patcher) -> bool:
    """Whether a traced call is open now in any thread (the C recorder's, and the Python probes' where they are
    tracked); True where that cannot be told (no C extension): a wait inside a step keeps the full rate."""
    ext = native.ext
    if ext is None or not hasattr(ext, "open_calls"):
        return True
    return ext.open_calls() > 0 or bool(patcher.live)


class RecorderLoop:
    """``Session``'s recorder thread: ``_loop`` runs in it (``Session._start_recorder``). Uses the session's
    ``settings``, ``sampler``, ``main_sampler``, ``memory``, ``budget``, ``stop_watch``, ``_flush`` and its locks."""

    # -- recorder thread -------------------------------------------------------------------------
    def _wake_resting(self) -> None:
        """Wake the recorder thread if it rests until the process uses CPU (``cpuwake``), or waits between the looks
        of ``Sampler.run_looks`` (``Walker.notify``)."""
        rest = self.cpu_wake
        if rest is not None:
            rest.wake()
        self.sampler.notify()

    def _loop(self, gen: int) -> None:
        me = threading.get_ident()
        keep_signals_off_this_thread()
        try:
            self._record_loop(gen)
        except Exception as e:  # a bug of stepscope's: never printed into the program, and spans still flushed
            self.recorder_error = f"{type(e).__name__}: {e}"  # other threads go unsampled from here on
            while not self.finished and os.getpid() == self._pid and self._gen == gen:
                self._stop.wait(self.settings.flush_interval_s)
                try:
                    self._flush()
                except Exception:
                    return
        finally:
            OWN_THREADS.discard(me)
            own, self.own_timers = self.own_timers, None
            if own is not None:
                own.close(self.sampler._walker)
            rest, self.cpu_wake = self.cpu_wake, None
            if rest is not None:
                rest.close()
                done = (rest.rests, rest.woken, rest.waits, rest.by_calls)
                self._rested = tuple(a + b for a, b in zip(self._rested, done))

    def _record_loop(self, gen: int) -> None:
        hz = self.settings.profiles_hz
        period = 1e9 / hz if hz > 0 else None
        flush_every = int(self.settings.flush_interval_s * 1e9)
        pending = buffer.pending
        me = threading.get_ident()
        OWN_THREADS.add(me)
        main = threading.main_thread().ident
        main_sampler = self.main_sampler
        now = clock.now_ns
        last_flush = next_t = now()
        flush_s = self.settings.flush_interval_s
        idle_poll = 100_000_000  # only the main thread (sampled by signal): look for new threads at 10 Hz
        last_full = 0  # when other threads' stacks were last read
        # the time (ns) covered by consecutive looks at which no other thread had run, each look counting the period it
        # stands for (the budget may have lowered the rate): past QUIET_NS the recorder looks at 10 Hz only (a server
        # between requests: each look is a wake-up, ~30 us of CPU); a thread found running after that is charged the
        # wait before its run at its previous stack (``Sampler.sample``), so no wall time is lost
        quiet = 0
        spans_at = 0  # finished spans waiting at the last look (or flush): more since, the program works
        looked = False  # a look since the last flush
        last_blocked = 0  # when the main thread was last checked for a wait its handler cannot interrupt
        # once nothing ran for QUIET_NS and the main thread is not sampled by its own timers, the recorder rests until
        # the process uses CPU (``cpuwake``: a timer on the process's CPU clock wakes it) or its next flush
        self.cpu_wake = rest = CpuWake.start(main_sampler.signums) if period is not None else None
        # a thread that runs all the time sampled by a timer of its own (``owntimers``: fewer looks here)
        if period is not None and self.sampler.walk == "c":
            self.own_timers = OwnTimers.start(main_sampler.signums + ((rest.signum,) if rest is not None else ()))
        # the memory lane: read by the main thread's wall-timer handler (no wake-up of its own); here when the
        # main thread is not sampled by signal, or its handler could not run for two periods (a long C call)
        mem = self.memory
        mem_period = max(int(period), MEMORY_PERIOD_MIN_NS) if period is not None else 9_900_990
        budget = self.budget = self.budget or (Budget(hz, self.settings.overhead_budget, now()) if hz > 0 else None)
        active_threads = threading._active
        while not self.finished and self._gen == gen:
            t = now()
            if budget is not None and budget.tick(t, self.sampler.own_ns):  # (the other threads' rate under the
                self.sampler.own_period(budget.own_period_ns())           # overhead budget, their own timers' too)
            if self.stop_watch is not None:
                self.stop_watch.check(main)
            if main_sampler.paused:
                main_sampler.check()
            if main_sampler.paused and main_sampler.resumable:
                self.sampler.own_stop()  # (no thread samples itself either: ``owntimers``)
                # 3.12+: the program runs its own profiler, which sees every thread's calls: sample nothing,
                # wake once a flush interval in one C call (a raw lock), and write what is pending
                if t - last_flush >= flush_every:
                    self._flush()
                    last_flush = t
                if park(self._wake, flush_s, flush_s, FLUSH_SPANS) == 1 and self._gen != gen:
                    return  # parked for a fork while paused
                continue
            st = main_sampler.st  # (its state's fields read directly: a C struct's members with the C handler)
            if st.active and not st.resting and t - last_blocked >= idle_poll:
                last_blocked = t  # (a main thread blocked where its handler cannot run rests from here)
                main_sampler.rest_if_blocked(t)
            # (a resting main thread, waiting: its wall timer is off and it is sampled here, ``signals.rest``)
            by_signal = st.active and not st.resting
            others = not by_signal or len(active_threads) > 1 + len(OWN_THREADS & active_threads.keys())
            # the memory lane's age at which this loop reads it (by signal the handler does; here after two periods)
            mem_every = 2 * mem_period if by_signal else mem_period * 9 // 10
            watch = self.stop_watch
            stop_fd = watch.r if watch is not None and watch.r is not None else -1
            if period is not None and t >= next_t:
                step = budget.period_ns(by_signal)  # (the main thread read here keeps the asked rate)
                self.sampler.period_ns = int(step)  # (a sample's charge is capped in periods: ``Sampler.sample``)
                budget.look_started()
                # (a look that ends a rest: lazy, see below; never inside a traced call, where rows are per step)
                resting = quiet >= REST_QUIET_NS and not by_signal and not (quiet < QUIET_NS
                                                                              and in_traced_call(self.patcher))
                # the main thread sampled by signal and every other thread blocked since it was read (a progress
                # bar's monitor, an idle request handler): their CPU clocks say nothing ran, so their stacks are
                # recorded again without a walk; they are walked when one runs, threads come or go, or at 10 Hz
                if others and (not by_signal or t - last_full >= idle_poll
                               or not self.sampler.sample_blocked((main,) if by_signal else ())):
                    # (st read again: a wake may have come since the top; a look that ends a rest records only
                    # threads that moved to another stack, the others' rows left for later: an idle server's event
                    # loop timer makes no rows, so nothing waits to be written)
                    ended, spans_at = pending() != spans_at, pending()  # (traced calls ended: the program works)
                    self.sampler.sample(exclude_thread=me, skip=(main,) if st.active and not st.resting else (),
                                        lazy=resting, busy=ended)
                    self._track_os_threads(self.sampler.last_threads, t)
                    last_full = t
                    # (nothing ran, or threads ran between waits within the idle share of a CPU while no traced
                    # call ended: an event loop's timer, a heartbeat; ``Sampler.idle``)
                    quiet = quiet + int(step) if self.sampler.idle(t, ended) else 0
                    if st.resting and main in self.sampler.ran:  # the main thread runs again
                        main_sampler.wake()
                elif others:
                    quiet += int(step)
                looked = looked or self.sampler.rows_waiting()  # (samples wait to be written)
                budget.look_ended()
                # the full rate while others run, and while the main thread may rest before a slower look: its
                # first look after the rest must come within a period (the time until it is charged at the stack the
                # rest began on, which a sleepy loop leaves within a few ms)
                near_rest = by_signal and (st.quiet_ticks + 1) * period + idle_poll >= REST_NS
                next_t += step if (others and quiet < QUIET_NS) or near_rest else max(step, idle_poll)
                if next_t < t:  # fell behind (GIL held elsewhere): skip, don't burst
                    next_t = t + period
            if mem is not None and t - mem.last_t >= mem_every and (by_signal or quiet < REST_QUIET_NS):
                mem.sample(t)  # (not while the recorder rests: nothing ran but under the idle share of a CPU)
            if t - last_flush >= flush_every or pending() >= FLUSH_SPANS:
                main_sampler.check()
                if by_signal:
                    self._track_os_threads([main], t)
                self._flush()
                last_flush, looked, spans_at = t, False, pending()
            # wake for the next sample or flush, whichever first (a slow --hz never delays a flush: a crash loses one)
            wake = last_flush + flush_every if period is None else min(next_t, last_flush + flush_every)
            if mem is not None and period is None:  # sampling off: the memory lane alone sets the pace
                wake = min(wake, mem.last_t + mem_period)
            # (inside a step: the full rate for QUIET_NS; asked only where the recorder may rest)
            early = rest is not None and not by_signal and quiet < QUIET_NS and in_traced_call(self.patcher)
            if rest is not None and not by_signal and quiet >= REST_QUIET_NS and not early and not self.finished:
                # nothing ran: no sample or memory reading would differ; what waits is written a flush interval after
                # the last write, and with nothing waiting the idle threads are looked at IDLE_LOOK_NS after it
                due = last_flush + (flush_every if looked or pending() or (mem is not None and mem.pending) else IDLE_LOOK_NS)
                while True:
                    # (a look each time the quiet time grew by REST_GROWTH: without rows when nothing moved)
                    t0 = now()
                    woke = rest.rest((min(due, t0 + max(int(period), int(quiet * REST_GROWTH))) - t0) / 1e9,
                                     flush_s, FLUSH_SPANS, stop_fd, keep=True)
                    t1 = now()
                    quiet += t1 - t0  # (the look that a move ends it with says whether it stays quiet: idle())
                    if woke != 0 or rest.by_call or t1 >= due or self.finished or self._gen != gen \
                            or not self.sampler.unmoved():
                        break
                rest.settle()
                if rest.by_call:  # a span started (a step of a loop that waits more than it runs): the full rate
                    quiet = 0
                next_t = now()  # (a look at once: what ran, and since when)
                continue
            if period is not None and others and quiet < QUIET_NS and self.sampler.walk == "c" and not main_sampler.paused:
                # the looks until anything else is due in one C call, the GIL taken for each look alone (looks.c)
                due = [last_flush + flush_every, budget.window_t + WINDOW_NS]  # (what the loop itself does, timed)
                if by_signal:
                    due.append(last_blocked + idle_poll)
                if mem is not None and mem.cuda.ready():  # (CUDA's figures are read by MemoryLane.sample)
                    due.append(mem._cuda_next)
                if mem is not None and mem.rss.fd < 0:
                    due.append(mem.last_t + mem_period)
                until = min(due)
                reason, looks, next_t, cpu, stop, quiet = self.sampler.run_looks(  # (it reads at each look whether st's
                    self._wake, {me, *OWN_THREADS}, int(next_t), int(until), main, st, stop_fd,  # timers sample main)
                    bytes(sorted(watch.sigs)) if stop_fd >= 0 else b"", buffer.finished, FLUSH_SPANS, mem, mem_every,
                    quiet, QUIET_NS if by_signal or rest is None or early else REST_QUIET_NS)
                if stop:
                    watch.pass_on(stop, main)
                if reason == 7:  # a profiler of the program's: waited out where it sees no call of ours
                    self.sampler.own_stop()  # (no thread samples itself meanwhile: ``owntimers``)
                    park(self._wake, (wake - now()) / 1e9, flush_s, FLUSH_SPANS)
                if looks:
                    budget.look_ns += cpu
                    looked = True
                    last_full = now()
                    self._track_os_threads(self.sampler.last_threads, last_full)
                    if st.resting and main in self.sampler.ran:
                        main_sampler.wake()
                continue
            if period is None and mem is not None and mem.rss.fd >= 0 and self.sampler.walk == "c":
                # sampling off, the memory lane alone: its rows read in C without the GIL until anything else is due
                # (here, a wake-up ~100 times a second that took the GIL from a busy main thread: a wait of ~0.1 ms
                # for it about once a denoising step)
                until = last_flush + flush_every
                if mem.cuda.ready():  # (CUDA's figures are read by MemoryLane.sample)
                    until = min(until, mem._cuda_next)
                reason, _, stop = self.sampler.run_lane(self._wake, int(until), mem, mem_period, stop_fd,
                                                        bytes(sorted(watch.sigs)) if stop_fd >= 0 else b"",
                                                        buffer.finished, FLUSH_SPANS)
                if stop:
                    watch.pass_on(stop, main)
                if reason == 7:  # a profiler of the program's: waited out where it sees no call of ours
                    park(self._wake, (wake - now()) / 1e9, flush_s, FLUSH_SPANS)
                continue
            park(self._wake, (wake - now()) / 1e9, flush_s, FLUSH_SPANS)  # (unseen by a profiler the program starts)
        if budget is not None:
            budget.close(now())

    def _track_os_threads(self, idents: list[int], t_ns: int) -> None:
        """Python reuses a thread ident once its thread exits: note each (ident, OS thread id, since) so
        that spans can be joined with the OS-thread-keyed device trace by time."""
        active = threading._active
        for ident in idents:
            th = active.get(ident)
            if th is not None and self._thread_objs.get(ident) is not th:
                self._thread_objs[ident] = th
                self._pending_os.append((ident, th.native_id, t_ns))
                self._pending_threads[ident] = (th.name, th.native_id)

