import time


def _busy(s):
    t = time.perf_counter() + s
    while time.perf_counter() < t:
        pass


class BaseModel:
    def apply_model(self, x, t, **kwargs):
        _busy(0.004)
        return x * 0.5
