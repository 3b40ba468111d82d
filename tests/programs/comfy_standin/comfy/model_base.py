import time


def _busy(s):
    """``s`` seconds of this thread's CPU time (so at least ``s`` of wall time, however busy the machine)."""
    t = time.thread_time() + s
    while time.thread_time() < t:
        pass


class BaseModel:
    def apply_model(self, x, t, **kwargs):
        time.sleep(0.015)  # (a device's time: wall-steady on a busy machine)
        return x * 0.5
