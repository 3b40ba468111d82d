"""Allocates N MiB (argv[1]) inside the traced function `grow` and holds it 0.4 s; before and after it the
program holds little. Optional argv[2] = "oom": `grow` then raises torch.OutOfMemoryError while holding it."""
import sys
import time


def grow(n_mib, oom=False):
    block = b"\x01" * (n_mib << 20)  # written: every page resident
    time.sleep(0.4)
    if oom:
        import torch

        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {n_mib} MiB (raised on the CPU for a test)")
    return len(block)


def main():
    time.sleep(0.2)
    grow(int(sys.argv[1]), len(sys.argv) > 2 and sys.argv[2] == "oom")
    time.sleep(0.2)


main()
