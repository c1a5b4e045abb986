#!/usr/bin/env python3
"""PyTorch yardstick for bench_train_gpu: the seed CNN trained eagerly on one device.

  python3 bench/train/torch_seed_cnn_gpu.py [--device cuda] [--batch 128] [--dtype float32|bfloat16]
                                            [--steps 50] [--warmup 10] [--repeats 3] [--tf32 on|off]
                                            [--profile-steps P]

The model of chorus's seed CNN (examples/mnist_mirrored.cc), in NCHW: Conv2D 32 3x3 relu ->
MaxPool 2 -> Conv2D 64 3x3 relu -> MaxPool 2 -> Conv2D 64 3x3 relu -> Flatten -> Dense 64 relu ->
Dense 10; Adam 1e-3 (PyTorch's default implementation for the device), cross-entropy on logits.
The data is resident on the device: 8 random batches of the global batch, cycled (chorus's side
cycles 8 cached batches). bfloat16 is torch.autocast(dtype=torch.bfloat16), as mixed_bfloat16 in
chorus: float32 weights, bfloat16 compute. --tf32 sets torch.backends.cuda.matmul.allow_tf32 and
torch.backends.cudnn.allow_tf32 both (bench_train_gpu passes chorus's setting); without it they stay
at PyTorch's defaults (matmul off, cuDNN on). Printed either way.
Timing: `warmup` steps, then `repeats` windows of `steps` steps, the device synchronized at both
ends of each window; ms/step is the median window's. Prints a readable line and, last,
`RESULT ms_per_step=<x> samples_per_s=<y>` for bench_train_gpu. Exits 3 without PyTorch, 4 when
the device is not there.
"""
import argparse
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tf32", choices=["on", "off"])
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the windows, this many steps between torch.cuda.profiler.start and stop "
                        "(the range ncu --profile-from-start off records: scripts/gpu-profile.sh)")
    a = p.parse_args()
    try:
        import torch
        import torch.nn as nn
    except ImportError as e:
        print(f"torch_seed_cnn_gpu: PyTorch is missing ({e})", file=sys.stderr)
        return 3
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_seed_cnn_gpu: no CUDA device", file=sys.stderr)
        return 4
    dev = torch.device(a.device)
    if a.tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = a.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = a.tf32 == "on"
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(64 * 3 * 3, 64), nn.ReLU(), nn.Linear(64, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    xs = [torch.rand(a.batch, 1, 28, 28, device=dev) for _ in range(8)]
    ys = [torch.randint(0, 10, (a.batch,), device=dev) for _ in range(8)]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def step(i):
        x, y = xs[i % 8], ys[i % 8]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bfloat16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for i in range(a.warmup):
        step(i)
    sync()
    windows = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        for i in range(a.steps):
            step(i)
        sync()
        windows.append((time.perf_counter() - t0) * 1e3 / a.steps)
    if a.profile_steps > 0 and dev.type == "cuda":
        sync()
        torch.cuda.profiler.start()
        for i in range(a.profile_steps):
            step(i)
        sync()
        torch.cuda.profiler.stop()
    ms = statistics.median(windows)
    tf32 = ""
    if dev.type == "cuda":
        tf32 = (f", matmul TF32 {torch.backends.cuda.matmul.allow_tf32}, cuDNN TF32 {torch.backends.cudnn.allow_tf32}"
                f", {torch.cuda.get_device_name(dev)}")
    print(f"PyTorch {torch.__version__} eager on {dev}{tf32}: batch {a.batch} {a.dtype}, "
          f"{ms:.3f} ms/step (windows: {', '.join(f'{w:.3f}' for w in windows)})")
    print(f"RESULT ms_per_step={ms:.6f} samples_per_s={a.batch * 1e3 / ms:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
