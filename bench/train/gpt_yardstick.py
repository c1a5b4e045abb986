#!/usr/bin/env python3
"""Yardsticks for bench_gpt (bench/train/gpt_bench.cc): the GPT of examples/gpt_model.h trained on
the CPU in TF/Keras (tf_keras 2.21) or in PyTorch, tokens per second.

  python gpt_yardstick.py --framework tf|torch [--threads 2] [--steps 20] [--warmup 3] [--repeats 1]
                          [--batch 32] [--seq 64] [--layers 2] [--d-model 128] [--heads 4] [--replicas 1]

The model, float32, no dropout: token + position Embedding, `layers` pre-LayerNormalization blocks
(LayerNorm eps 1e-3 → causal multi-head self-attention, heads x d_model/heads, with q/k/v/output
projections and biases → residual add → LayerNorm → Linear 4·d_model, exact GELU → Linear d_model →
residual add), a final LayerNorm, a Linear to 256 logits; mean sparse cross-entropy on the logits.
Optimizer as gpt_mirrored's: AdamW (weight decay 0.01, epsilon 1e-7), learning rate 0 → 3e-3 over
a linear warm-up of 10% of the steps, then cosine decay to 10%; gradients clipped to global norm 1.
  tf:    tf_keras functional model (Embedding, LayerNormalization, MultiHeadAttention with
         use_causal_mask, Dense, Add), AdamW + CosineDecay(warmup_target=...), Model.fit on a
         tf.data pipeline of cached random batches (prefetched); TensorFlow's intra-op and inter-op
         pools both --threads, tf.data's private pool --threads. Timed by a callback stamping
         every batch end: each window of `steps` steps after the warm-up runs from the stamp that
         ends the previous window to its own last one (tracing and fit's setup fall outside).
         --replicas N > 1: the CPU split into N logical devices (tf.config.set_logical_device_
         configuration) and the model built, compiled and fit under tf.distribute.MirroredStrategy
         over them (TF's own choice of cross-device ops for CPUs); --batch stays the global batch.
  torch: eager nn.Module (nn.Embedding, nn.LayerNorm, nn.Linear, F.scaled_dot_product_attention
         with is_causal=True), torch.optim.AdamW + LambdaLR of the same schedule,
         clip_grad_norm_; torch.set_num_threads(--threads) and set_num_interop_threads(--threads);
         a loop over 8 fixed random batches. Each window timed with perf_counter around `steps`
         steps (the loss is read back every step, as fit's logs do). bench_gpt runs the 2-thread
         case with OMP_WAIT_POLICY=PASSIVE (gpt_bench.cc says why).
Batches are random tokens (uniform over 0..255): the step's cost does not depend on the values.

Prints a readable line and, last, `RESULT tokens_per_s=<median> min_tokens_per_s=.. max_tokens_per_s=..
ms_per_step=.. peak_rss_mib=..`. Exits 3 when the framework cannot be imported (the line says why).
"""
import argparse
import math
import os
import resource
import sys
import time


def schedule_args(total_steps):
    warmup = max(total_steps // 10, 1)
    return warmup, max(total_steps - warmup, 1)


def lr_at(step, warmup, decay_steps, target=3e-3, alpha=0.1):
    """Keras's CosineDecay(0.0, decay_steps, alpha, warmup_target=target, warmup_steps=warmup)."""
    if step < warmup:
        return target * step / warmup
    s = min(step - warmup, decay_steps)
    return target * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * s / decay_steps)) + alpha)


def median(v):
    v = sorted(v)
    k = len(v)
    return v[k // 2] if k % 2 else 0.5 * (v[k // 2 - 1] + v[k // 2])


def run_tf(a, total):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    try:
        import numpy as np
        import tensorflow as tf
        import tf_keras as K
    except ImportError as e:
        print(f"skipped: TF/Keras cannot be imported ({e})")
        return None
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    K.mixed_precision.set_global_policy("float32")
    strategy = tf.distribute.get_strategy()  # the default: one device
    if a.replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * a.replicas)
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(a.replicas)])

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
    from gpt_model import build_gpt  # examples/gpt_model.py: the GPT of examples/gpt_model.h

    warmup, decay = schedule_args(total)
    with strategy.scope():
        model = build_gpt(K, tf, a.seq, a.layers, a.d_model, a.heads)
        model.compile(
            optimizer=K.optimizers.AdamW(
                learning_rate=K.optimizers.schedules.CosineDecay(0.0, decay, alpha=0.1, warmup_target=3e-3,
                                                                 warmup_steps=warmup),
                weight_decay=0.01, global_clipnorm=1.0),
            loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))

    rng = np.random.default_rng(1)
    n = 8 * a.batch
    xs = rng.integers(0, 256, (n, a.seq)).astype(np.int32)
    ys = rng.integers(0, 256, (n, a.seq)).astype(np.int32)
    options = tf.data.Options()
    options.threading.private_threadpool_size = a.threads
    ds = (tf.data.Dataset.from_tensor_slices((xs, ys)).batch(a.batch, drop_remainder=True).cache().repeat()
          .prefetch(tf.data.AUTOTUNE).with_options(options))
    stamps = []

    class Stamp(K.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            stamps.append(time.perf_counter())

    model.fit(ds, epochs=1, steps_per_epoch=total, verbose=0, callbacks=[Stamp()])
    walls = [stamps[a.warmup - 1 + (r + 1) * a.steps] - stamps[a.warmup - 1 + r * a.steps] for r in range(a.repeats)]
    where = (f", MirroredStrategy over {a.replicas} logical CPU devices ({type(strategy.extended._cross_device_ops or object()).__name__})"
             if a.replicas > 1 else "")
    return walls, (f"tensorflow {tf.__version__} tf_keras {K.__version__}, {a.threads} intra-op + {a.threads} "
                   f"inter-op threads{where}")


def run_torch(a, total):
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or an OSError of a missing shared library
        print(f"skipped: PyTorch cannot be imported ({type(e).__name__}: {e})")
        return None
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(a.threads)
    torch.manual_seed(1)

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.norm1 = nn.LayerNorm(d, eps=1e-3)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.norm2 = nn.LayerNorm(d, eps=1e-3)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, h):
            b, t, d = h.shape
            x = self.norm1(h)
            split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
            y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), is_causal=True)
            h = h + self.o(y.transpose(1, 2).reshape(b, t, d))
            return h + self.down(F.gelu(self.up(self.norm2(h))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.token = nn.Embedding(256, a.d_model)
            self.position = nn.Embedding(a.seq, a.d_model)
            self.blocks = nn.ModuleList(Block(a.d_model, a.heads) for _ in range(a.layers))
            self.norm = nn.LayerNorm(a.d_model, eps=1e-3)
            self.logits = nn.Linear(a.d_model, 256)
            self.register_buffer("positions", torch.arange(a.seq), persistent=False)

        def forward(self, x):
            h = self.token(x) + self.position(self.positions)
            for blk in self.blocks:
                h = blk(h)
            return self.logits(self.norm(h))

    model = Gpt()
    warmup, decay = schedule_args(total)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, eps=1e-7, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s, warmup, decay) / 3e-3)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 256, (a.batch, a.seq), generator=g), torch.randint(0, 256, (a.batch, a.seq), generator=g))
               for _ in range(8)]

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss.item()

    for i in range(a.warmup):
        step(i)
    walls = []
    for r in range(a.repeats):
        t0 = time.perf_counter()
        for i in range(a.steps):
            step(a.warmup + r * a.steps + i)
        walls.append(time.perf_counter() - t0)
    return walls, f"torch {torch.__version__} eager, {a.threads} intra-op + {a.threads} inter-op threads"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--framework", choices=["tf", "torch"], required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--replicas", type=int, default=1, help="tf only: MirroredStrategy over this many logical CPUs")
    a = p.parse_args()
    if a.warmup < 1 or a.steps < 1 or a.repeats < 1 or a.replicas < 1:
        print("error: --warmup, --steps, --repeats and --replicas must be >= 1", file=sys.stderr)
        return 2
    if a.replicas > 1 and a.framework != "tf":
        print("error: --replicas is for --framework tf (PyTorch's side is one process)", file=sys.stderr)
        return 2
    total = a.warmup + a.repeats * a.steps
    out = run_tf(a, total) if a.framework == "tf" else run_torch(a, total)
    if out is None:
        return 3
    walls, what = out
    tps = sorted(a.steps * a.batch * a.seq / w for w in walls)
    med = median(tps)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"{what}, global batch {a.batch} x {a.seq} tokens, {a.warmup} warm-up + {a.repeats} x {a.steps} steps: "
          f"{med:.0f} tokens/s (median; {tps[0]:.0f}-{tps[-1]:.0f}), {a.batch * a.seq / med * 1e3:.1f} ms/step, "
          f"peak RSS {rss_mib:.0f} MiB")
    print(f"RESULT tokens_per_s={med:.6g} min_tokens_per_s={tps[0]:.6g} max_tokens_per_s={tps[-1]:.6g} "
          f"ms_per_step={a.batch * a.seq / med * 1e3:.6g} peak_rss_mib={rss_mib:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
