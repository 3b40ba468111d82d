import time


def _busy(s):
    t = time.perf_counter() + s
    while time.perf_counter() < t:
        pass


class BaseModel:
    def apply_model(self, x, t, **kwargs):
        time.sleep(0.004)  # (a device's time: wall-steady on a busy machine)
        return x * 0.5
