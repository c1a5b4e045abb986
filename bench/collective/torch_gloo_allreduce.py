# PyTorch's Gloo all-reduce latency: the yardstick for chorus's Gloo backend (bench_gloo,
# docs/benchmarks.md "Gloo against MPI"). Two processes on one host, float32 SUM on zero tensors,
# 3 warm-up calls, then 3 timed batches (200 calls below 1 MiB, 30 from 1 MiB); prints the median
# batch's time per call, on rank 0.
#
#   for r in 1 0; do MASTER_ADDR=127.0.0.1 MASTER_PORT=29777 WORLD_SIZE=2 RANK=$r \
#     ~/.cache/chorus/torch-venv/bin/python bench/collective/torch_gloo_allreduce.py & done; wait
import os, time, torch, torch.distributed as dist, sys
dist.init_process_group("gloo")
r = dist.get_rank()
for n in [1, 1024, 16384, 262144, 4194304]:
    t = torch.zeros(n)
    for _ in range(3): dist.all_reduce(t)
    reps = 200 if n < 262144 else 30
    ts = []
    for k in range(3):
        dist.barrier(); t0 = time.perf_counter()
        for _ in range(reps): dist.all_reduce(t)
        ts.append((time.perf_counter() - t0) / reps)
    ts.sort()
    if r == 0: print(f"torch gloo all_reduce {n*4} B: {ts[1]*1e6:.1f} us", flush=True)
dist.destroy_process_group()
