"""How a recorded process ends by a signal it left at its default: the run is written first, then the process dies by
the same signal (``end_by_signal``); a forked child of the program gets the default action back
(``_default_in_forked_child``); the run's status for a signal (``signal_status``). Started as a part of the
recording (``parts.EndSignals``) of the top program and each new interpreter of the job (``launch``) and of a forked
child recorded in turn (``processes.follow_fork``). Stdlib only."""

from __future__ import annotations

import os
import signal


def signal_status(sig: int) -> str:
    """The status of a run that signal ``sig`` ended."""
    return {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}.get(sig, "killed")


#: Signals that end the program by default: the run is written first (when the program left them alone).
_FATAL = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2") if hasattr(signal, n))


def end_by_signal(session) -> None:
    """Write the run, then die by the signal as the program would have (it left the default action)."""
    def on_signal(signum, frame):
        if not session.flush_on_signal(signal_status(signum), -signum, signal.Signals(signum).name, signum):
            return  # the run's final write under way ends first, then dies by this signal
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    on_signal.stepscope_stop = True  # (a forked child's new session takes over its parent's: ``processes``)
    ours = [sig for sig in _FATAL if signal.getsignal(sig) is signal.SIG_DFL
            or getattr(signal.getsignal(sig), "stepscope_stop", False)]
    for sig in ours:
        signal.signal(sig, on_signal)
    _default_in_forked_child(ours, on_signal)
    watch = StopWatch(ours)
    if watch.arm():
        session.stop_watch = watch


#: the write ends of the wakeup pipes of ``StopWatch`` (a forked child replaces the one it inherited)
_WATCH_FDS: set[int] = set()


class StopWatch:
    """Makes sure a stop signal's Python handler runs. A program that left SIGTERM at its default dies at once
    wherever its main thread is; with stepscope's Python-level handler (``end_by_signal``) the handler runs only when
    the main thread next checks for signals, and a main thread that was about to block in C (``sem_wait`` of a
    multiprocessing queue, a lock) when the signal came blocks for good: the signal was taken, the call never
    returns. The signal's C handler writes its number to the wakeup fd (``signal.set_wakeup_fd``): a pipe that the
    recorder thread reads at each look (``check``); for a stop signal it sends the signal again to the main thread
    (``signal.pthread_kill``), which interrupts the blocking call (EINTR) and runs the handler. Used where the
    program has no wakeup fd of its own (an asyncio loop's replaces it: the loop then wakes on its own)."""

    def __init__(self, sigs) -> None:
        from . import native

        self.sigs = frozenset(int(s) for s in sigs)
        self.r: int | None = None
        self._read = getattr(native.ext, "read_held", None) or os.read

    def arm(self) -> bool:
        """Set the wakeup fd (main thread only); False when the program, or stepscope's runner, has one."""
        if not self.sigs:
            return False
        try:
            old = signal.set_wakeup_fd(-1)
        except (ValueError, OSError):
            return False
        if old != -1 and old not in _WATCH_FDS:  # the program's (or the runner's pipe): put back
            signal.set_wakeup_fd(old, warn_on_full_buffer=False)
            return False
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        _WATCH_FDS.add(w)
        self.r = r
        return True

    def check(self, main_ident: int | None) -> None:
        """Recorder thread: pass a stop signal that reached the process on to the main thread again."""
        if self.r is None or main_ident is None:
            return
        try:  # (with the GIL kept where the extension is: os.read hands it to a busy thread, and waits to get it back)
            got = self._read(self.r, 256)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.r = None
            return
        self.pass_on(got, main_ident)

    def pass_on(self, got: bytes, main_ident: int) -> None:
        """Send each stop signal among ``got`` (signal numbers read from the pipe) to the main thread again."""
        for b in set(got) & self.sigs:
            try:
                signal.pthread_kill(main_ident, b)
            except (OSError, ValueError):
                pass


def _default_in_forked_child(sigs: list, handler) -> None:
    """A forked child of the program is the child of an unprofiled program: ``sigs`` take their default action
    there again. They are blocked across the fork (the forking thread's mask, inherited by the child), so that
    one sent to the child before its handler is reset waits in the kernel and then acts by default: Python
    drops a signal its C handler caught before its after-fork clean-up, and one caught after it would run
    ``handler`` late or not at all."""
    from .sampling.signals import default_where  # (imported here, not in the forked child)

    saved: list = []

    def before() -> None:
        try:
            saved.append(signal.pthread_sigmask(signal.SIG_BLOCK, sigs))
        except (OSError, ValueError):
            saved.append(None)

    def restore() -> None:
        old = saved.pop() if saved else None
        if old is not None:
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            except (OSError, ValueError):
                pass

    def in_child() -> None:
        default_where(sigs, handler)
        restore()  # a signal that came meanwhile acts now, by default

    if sigs and hasattr(signal, "pthread_sigmask"):
        os.register_at_fork(before=before, after_in_parent=restore, after_in_child=in_child)
