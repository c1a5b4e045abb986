#!/usr/bin/env python3
"""TensorFlow yardstick for bench_train: the seed CNN trained with Keras `fit`, on one CPU device or
under `tf.distribute.MirroredStrategy` over logical CPU devices.

  python tf_seed_cnn.py [--devices 1] [--threads 2] [--steps 30] [--warmup 3] [--batch 128] [--repeats 5]

Same model, optimizer, loss and data as chorus's bench/train/seed_cnn.h: Conv2D 32 3x3 relu ->
MaxPool 2 -> Conv2D 64 3x3 relu -> MaxPool 2 -> Conv2D 64 3x3 relu -> Flatten -> Dense 64 relu ->
Dense 10 (NHWC, float32), Adam 1e-3, sparse categorical cross-entropy on logits; 8 distinct global
batches of random 28x28x1 images and labels, batched once, cached, repeated and prefetched
(tf.data AUTOTUNE), as chorus's synthetic_digits(8 x batch).batch().cache().repeat().prefetch().

Threads: TensorFlow's intra-op and inter-op pools are both set to --threads (default 2, the
machine's cores), shared by every logical device, and tf.data's private pool to the same count;
with --devices 2 the global batch is split over two logical CPU devices by MirroredStrategy.

Timing (steady state only): one `fit` call of warmup + repeats x steps steps; a callback stamps the
end of every batch, and each window of `steps` steps after the warm-up is timed from the stamp that
ends the previous window to its own last stamp, so compilation, the first epoch's setup and fit's
teardown fall outside every window. samples/s is the median window's.

Prints a readable line and, last, `RESULT samples_per_s=<x> min_samples_per_s=.. max_samples_per_s=..
ms_per_step=.. peak_rss_mib=..` (peak RSS of the process: getrusage ru_maxrss). Exits 3 when
TensorFlow cannot be imported.
"""
import argparse
import os
import resource
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    try:
        import numpy as np
        import tensorflow as tf
    except ImportError as e:
        print(f"skipped: TensorFlow cannot be imported ({e})")
        return 3

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    cpu = tf.config.list_physical_devices("CPU")[0]
    if a.devices > 1:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * a.devices)
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(a.devices)])
    else:
        strategy = tf.distribute.get_strategy()  # the default strategy: one device, no distribution

    keras = tf.keras
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    rng = np.random.default_rng(1)
    n = 8 * a.batch
    x = rng.random((n, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    options = tf.data.Options()
    options.threading.private_threadpool_size = a.threads
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).batch(a.batch, drop_remainder=True).cache().repeat()
          .prefetch(tf.data.AUTOTUNE).with_options(options))

    stamps = []

    class Stamp(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            stamps.append(time.perf_counter())

    total = a.warmup + a.repeats * a.steps
    model.fit(ds, epochs=1, steps_per_epoch=total, verbose=0, callbacks=[Stamp()])
    if len(stamps) != total:
        print(f"error: {len(stamps)} batch stamps for {total} steps")
        return 1
    walls = []
    for r in range(a.repeats):
        begin = stamps[a.warmup - 1 + r * a.steps]
        end = stamps[a.warmup - 1 + (r + 1) * a.steps]
        walls.append(end - begin)
    sps = sorted(a.steps * a.batch / w for w in walls)
    k = len(sps)
    med = sps[k // 2] if k % 2 else 0.5 * (sps[k // 2 - 1] + sps[k // 2])
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    where = "one CPU device" if a.devices == 1 else f"MirroredStrategy over {a.devices} logical CPU devices"
    print(f"tensorflow {tf.__version__} keras {keras.__version__}, {where}, {a.threads} intra-op + {a.threads} "
          f"inter-op threads, global batch {a.batch}, {a.warmup} warm-up + {a.repeats} x {a.steps} steps: "
          f"{med:.1f} samples/s (median; {sps[0]:.0f}-{sps[-1]:.0f}), {a.batch / med * 1e3:.2f} ms/step, "
          f"peak RSS {rss_mib:.0f} MiB")
    print(f"RESULT samples_per_s={med:.6g} min_samples_per_s={sps[0]:.6g} max_samples_per_s={sps[-1]:.6g} "
          f"ms_per_step={a.batch / med * 1e3:.6g} peak_rss_mib={rss_mib:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
