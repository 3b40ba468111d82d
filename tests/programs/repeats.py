"""A loop whose every 4th iteration also calls a costly function."""
import time

from sstargets import funcs


def costly():
    time.sleep(0.06)


def step(i):
    funcs.sleep_ms(20)
    if i % 4 == 3:
        costly()


def main():
    for i in range(12):
        step(i)


if __name__ == "__main__":
    main()
