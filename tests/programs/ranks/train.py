"""A 2-rank DDP job (gloo, CPU) with a straggler: rank 1 runs slow_augment on steps 3 and 5 (about 150 ms each), so
rank 0 waits for it inside DDP's gradient all-reduce and the explicit all_reduce of the loss. Usage:
torchrun --nproc-per-node 2 train.py STEPS"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def slow_augment(x):
    end = time.perf_counter() + 0.15
    while time.perf_counter() < end:  # busy: the straggler's cause is on its CPU samples
        x = x * 1.0000001
    return x


def train_step(model, opt, step, rank):
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(step * 10 + rank))
    if rank == 1 and step in (3, 5):
        x = slow_augment(x)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    dist.all_reduce(loss.detach())
    return float(loss)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        train_step(model, opt, step, rank)
    dist.barrier()
    if rank == 0:
        print(f"trained {steps} steps on {dist.get_world_size()} ranks")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
