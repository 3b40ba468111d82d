"""Prints, then ends as told: `ok`, `exit N`, `raise`, `keyboard`, `exit-str`, `thread`."""
import sys
import threading

from sstargets import funcs


def main(mode):
    print("out line", funcs.add(1))
    print("err line", file=sys.stderr)
    if mode == "ok":
        return
    if mode.startswith("exit "):
        sys.exit(int(mode.split()[1]))
    if mode == "exit-str":
        sys.exit("fatal: bad config")
    if mode == "raise":
        funcs.boom()
    if mode == "keyboard":
        raise KeyboardInterrupt
    if mode == "thread":
        t = threading.Thread(target=lambda: [funcs.add(i) for i in range(5)], name="worker")
        t.start()
        t.join()
        print("threads done")


if __name__ == "__main__":
    main(" ".join(sys.argv[1:]) or "ok")
