"""A program with a known timing shape: hot() takes about 70% of the wall time, cold() about 30%."""
import sys
import time


def spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def hot(seconds):
    return spin(seconds)


def cold(seconds):
    return spin(seconds)


def main(total):
    for _ in range(10):
        hot(0.07 * total)
        cold(0.03 * total)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
