"""The sampling profiler (collect side): every thread's stack into frame, stack and sample tables (``sampler``), the
main thread's timer-signal sampler (``signals``) and its POSIX timers (``timer``). Call trees over the samples are
``analysis.calltree``.
"""
