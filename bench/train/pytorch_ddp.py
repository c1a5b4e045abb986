#!/usr/bin/env python3
"""PyTorch yardstick for bench_train: the seed CNN trained with DistributedDataParallel (gloo).

  python3 bench/train/pytorch_ddp.py [--world-size 2] [--steps 30] [--warmup 3] [--batch 128] [--repeats 5]

Same model as chorus's seed CNN (examples/mnist_mirrored.cc), in NCHW: Conv2D 32 3x3 relu ->
MaxPool 2 -> Conv2D 64 3x3 relu -> MaxPool 2 -> Conv2D 64 3x3 relu -> Flatten -> Dense 64 relu ->
Dense 10; Adam 1e-3, cross-entropy on logits, random data of the same shapes. The global batch is
split over world_size processes of one thread each (torch.set_num_threads(1)) on localhost.
Timing as bench_train's: `warmup` steps, then `repeats` windows of `steps` steps, each between two
barriers; samples/s is the median window's (rank 0's clock). The data is one fixed random batch
per process (no input pipeline: chorus's side cycles 8 cached batches through its dataset).
Prints a readable line and, last, `RESULT samples_per_s=<x> ms_per_step=<y>` for bench_train.
Needs PyTorch (Debian: apt-get install python3-torch); exits 3 when it is missing.
"""
import argparse
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world_size, port, steps, warmup, batch, repeats, queue):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    torch.manual_seed(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(64 * 3 * 3, 64), nn.ReLU(), nn.Linear(64, 10))
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    local = batch // world_size
    x = torch.rand(local, 1, 28, 28)
    y = torch.randint(0, 10, (local,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    walls = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        dist.barrier()
        walls.append(time.perf_counter() - start)
    if rank == 0:
        queue.put(walls)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("skipped: PyTorch not installed (apt-get install python3-torch)")
        return 3
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(worker, args=(a.world_size, free_port(), a.steps, a.warmup, a.batch, a.repeats, queue),
                       nprocs=a.world_size, join=True, start_method="spawn")
    walls = sorted(queue.get())
    n = len(walls)
    wall = walls[n // 2] if n % 2 else 0.5 * (walls[n // 2 - 1] + walls[n // 2])
    sps = a.steps * a.batch / wall
    print(f"pytorch {torch.__version__} DDP gloo, world size {a.world_size}, 1 thread each, "
          f"global batch {a.batch}, {a.warmup} warm-up + {n} x {a.steps} steps: {sps:.1f} samples/s (median; "
          f"{a.steps * a.batch / walls[-1]:.0f}-{a.steps * a.batch / walls[0]:.0f}), {wall / a.steps * 1e3:.2f} ms/step")
    print(f"RESULT samples_per_s={sps:.6g} ms_per_step={wall / a.steps * 1e3:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
