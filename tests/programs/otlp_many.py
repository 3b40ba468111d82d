"""20,000 calls of a traced function f for the OTLP export's encoding tests, in 20 `chunk` spans (stepscope.span)
carrying attributes of every kind an OTLP attribute value takes (int, float and NaN, bool, str, lists, an int past
64 bits, a dict, an empty list), some raising KeyError, half of them on a second thread named "worker"."""
import threading

import stepscope


def f(i):
    return i


def chunk(k):
    attrs = {"diffusion.step": k, "loss": float("nan") if k == 0 else 0.5 * k, "ok": k % 2 == 0, "label": f"c{k}",
             "shape": [1, 2, k], "tags": ["x", "y"], "big": 2**70, "cfg": {"k": k}, "empty": []}
    try:
        with stepscope.span("chunk", op="step", **attrs):
            for i in range(1000):
                f(i)
            if k % 7 == 3:
                raise KeyError(k)
    except KeyError:
        pass


def chunks(ks):
    for k in ks:
        chunk(k)


if __name__ == "__main__":
    worker = threading.Thread(target=chunks, args=(range(10, 20),), name="worker")
    worker.start()
    chunks(range(10))
    worker.join()
    print("many done")
