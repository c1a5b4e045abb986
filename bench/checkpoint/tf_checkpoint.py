#!/usr/bin/env python3
"""TensorFlow yardstick for bench_checkpoint: one save and one restore of tf.train.Checkpoint.

  python bench/checkpoint/tf_checkpoint.py --mib 256 --dir /tmp/x [--warm]

The same variables as bench_checkpoint's chorus cases: float32 tf.Variables of 4 MiB each (the
last one smaller when the size is not a multiple), children "v0", "v1", ... of one
tf.train.Checkpoint, values (global element index % 1000) * 0.5, on the CPU.
One case per process, as bench_checkpoint runs each of its own cases:
  1. warm-up (untimed): write and read twice (TF builds its save/restore functions on first use;
     steady state is what a training job that saves repeatedly sees; twice, as bench_checkpoint's
     own cases do), then delete the files and sync(2), so the timed save starts with nothing dirty
     in the page cache;
  2. save (timed): Checkpoint.write(prefix), then fsync of every file it wrote and of the
     directory (TensorFlow does not fsync; chorus's save does, and so does the raw yardstick);
  3. the files are dropped from the page cache (fdatasync + POSIX_FADV_DONTNEED; --warm keeps
     them) and the variables set to zero;
  4. restore (timed): Checkpoint.read(prefix) (eager: the values are assigned before it returns)
     and assert_consumed();
  5. the last variable is compared with the expected values (outside the timing).
Prints `RESULT save_s=<s> restore_s=<s>`; exits 3 when TensorFlow cannot be imported.
"""
import argparse
import glob
import os
import sys
import time

FLOATS_PER_VARIABLE = (4 << 20) // 4


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fsync_path(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--warm", action="store_true")
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    try:
        import numpy as np
        import tensorflow as tf
    except ImportError as e:
        print(f"TensorFlow is not importable: {e}")
        return 3

    total = a.mib << 18  # float32 elements
    variables = {}
    with tf.device("/CPU:0"):
        for i, start in enumerate(range(0, total, FLOATS_PER_VARIABLE)):
            n = min(FLOATS_PER_VARIABLE, total - start)
            values = ((np.arange(start, start + n, dtype=np.int64) % 1000) * 0.5).astype(np.float32)
            variables[f"v{i}"] = tf.Variable(values)
    last = variables[f"v{len(variables) - 1}"]
    expected = last.numpy().copy()
    ckpt = tf.train.Checkpoint(**variables)
    prefix = os.path.join(a.dir, "tf_ckpt")

    def files():
        return glob.glob(prefix + ".index") + glob.glob(prefix + ".data-*")

    def remove():
        for f in files():
            os.remove(f)

    for _ in range(2):
        ckpt.write(prefix)
        ckpt.read(prefix).assert_consumed()
        remove()
    os.sync()

    t0 = time.perf_counter()
    ckpt.write(prefix)
    for f in files():
        fsync_path(f)
    fsync_path(a.dir, directory=True)
    save_s = time.perf_counter() - t0

    if not a.warm:
        for f in files():
            drop_cache(f)
    for v in variables.values():
        v.assign(tf.zeros_like(v))

    t0 = time.perf_counter()
    ckpt.read(prefix).assert_consumed()
    restore_s = time.perf_counter() - t0

    if not np.array_equal(last.numpy(), expected):
        print("TensorFlow restored different values")
        return 1
    remove()
    print(f"RESULT save_s={save_s:.6f} restore_s={restore_s:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
