"""A 2-rank DDP job (gloo, CPU) that trains until the file STOP exists (at most 120 s), for `stepscope capture` of
the whole job: rank 1 runs slow_augment (60 ms) on every 5th step. Usage: torchrun --nproc-per-node 2 train_loop.py
STOP (rank 0 prints "up" once the first step is done)."""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def slow_augment(x):
    end = time.perf_counter() + 0.06
    while time.perf_counter() < end:
        x = x * 1.0000001
    return x


def train_step(model, opt, step, rank):
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(step * 10 + rank))
    if rank == 1 and step % 5 == 3:
        x = slow_augment(x)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def main():
    stop = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    t_end = time.monotonic() + 120
    step = 0
    while True:
        flag = torch.tensor([int(os.path.exists(stop) or time.monotonic() > t_end)])
        dist.all_reduce(flag)  # every rank stops at the same step
        if flag.item():
            break
        train_step(model, opt, step, rank)
        if step == 0 and rank == 0:
            print("up", flush=True)
        step += 1
    dist.barrier()
    if rank == 0:
        print("stopped", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
