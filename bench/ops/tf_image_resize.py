"""TensorFlow's side of bench_image_ops: times tf.image.resize (eager, CPU, TF's own kernels) on
the case given, prints `RESULT ms=<median milliseconds per call>`. Inputs are zeros-plus-ramp
arrays of the same shape and dtype as chorus's side (the time does not depend on the values)."""
import argparse
import os
import time

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--shape", required=True)  # b,h,w,c
p.add_argument("--size", required=True)  # h,w
p.add_argument("--dtype", default="float32")
p.add_argument("--method", default="bilinear")
p.add_argument("--grad", type=int, default=0)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeats", type=int, default=10)
a = p.parse_args()
tf.config.threading.set_intra_op_parallelism_threads(a.threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
shape = [int(v) for v in a.shape.split(",")]
size = [int(v) for v in a.size.split(",")]
x = tf.constant((np.arange(np.prod(shape)) % 251).reshape(shape).astype(a.dtype))


def step():
    if not a.grad:
        return tf.image.resize(x, size, method=a.method)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.image.resize(x, size, method=a.method)
    return tape.gradient(y, x, output_gradients=tf.ones_like(y))


step().numpy()
times = []
for _ in range(a.repeats):
    t0 = time.perf_counter()
    step().numpy()
    times.append((time.perf_counter() - t0) * 1e3)
print("tensorflow", tf.__version__)
print(f"RESULT ms={float(np.median(times))}")
