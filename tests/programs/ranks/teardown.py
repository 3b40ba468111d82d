"""One rank (gloo, CPU) that ends as scripts often do: ``destroy_process_group()`` while its DDP model is alive,
then the model freed. Prints the process's thread count before and after freeing the model: freeing it destroys
the process group (its gloo worker threads end) unless something else still holds the group.
Environment: MASTER_ADDR, MASTER_PORT."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def main():
    dist.init_process_group("gloo", rank=0, world_size=1)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
    dist.barrier()
    dist.destroy_process_group()
    before = threads()
    del model
    print(f"threads {before} {threads()}")


if __name__ == "__main__":
    main()
