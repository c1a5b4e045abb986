"""Prints TensorFlow's grouped, depthwise and 1-D convolutions for tests/ops/conv_variants_test.cc.

The cases live here only: for each one a line
  case <name> <op> <x shape> <filter shape> <strides> <padding> <dilations>
(op: conv2d, depthwise_conv2d or conv1d; shapes and pairs comma-separated; conv1d's stride and
dilation are single numbers), then `y ...`, `dx ...`, `dw ...`: the output and the gradients of
sum(y * u) with respect to the input and the filter, in float64 (Python's repr of each value).
Inputs and u are the same closed forms as in the C++ test:
  x[i] = sin(0.913 i + 0.3), filter[i] = 0.5 cos(1.37 i + 0.1), u[i] = cos(0.37 i + 0.5)
over the flat row-major index i."""
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

CASES = [
    # name, op, x shape, filter shape, strides, padding, dilations
    ("grouped_valid", "conv2d", [2, 6, 5, 4], [3, 3, 2, 6], [1, 1], "VALID", [1, 1]),
    ("grouped3_same_stride2x1", "conv2d", [1, 7, 6, 6], [3, 2, 2, 9], [2, 1], "SAME", [1, 1]),
    ("grouped4_dilated_same", "conv2d", [2, 7, 7, 4], [3, 3, 1, 8], [1, 1], "SAME", [2, 2]),
    ("depthwise_m2_stride2_same", "depthwise_conv2d", [2, 6, 6, 3], [3, 3, 3, 2], [2, 2], "SAME", [1, 1]),
    ("depthwise_m1_dilated_same", "depthwise_conv2d", [1, 5, 6, 4], [2, 3, 4, 1], [1, 1], "SAME", [2, 2]),
    ("depthwise_m3_valid", "depthwise_conv2d", [2, 5, 4, 2], [2, 2, 2, 3], [1, 1], "VALID", [1, 1]),
    ("conv1d_stride2_same", "conv1d", [2, 9, 4], [3, 4, 5], [2], "SAME", [1]),
    ("conv1d_grouped_dilated_valid", "conv1d", [2, 10, 6], [3, 3, 4], [1], "VALID", [2]),
]


def pattern(shape, a, b, scale=1.0, fn=np.sin):
    i = np.arange(int(np.prod(shape)), dtype=np.float64)
    return tf.constant((scale * fn(a * i + b)).reshape(shape), dtype=tf.float64)


def grouped(conv, x, w):
    """A grouped convolution as the concatenation of one convolution per group: TensorFlow's CPU
    kernels compute grouped forwards but not their gradients ("Gradients for grouped convolutions
    are not supported on CPU"), so the gradients come from this form, checked against the
    grouped forward in main()."""
    groups = x.shape[-1] // w.shape[-2]
    xs = tf.split(x, groups, axis=-1)
    ws = tf.split(w, groups, axis=-1)
    return tf.concat([conv(a, b) for a, b in zip(xs, ws)], axis=-1)


def dilate(w, dilations):
    """The filter with dilation - 1 zeros between taps along its leading (spatial) axes, so that a
    dilated convolution is an undilated one: TensorFlow's CPU gradients refuse dilations > 1
    ("Current CPU implementations do not yet support dilation rates larger than 1")."""
    spatial = w.shape[: len(dilations)]
    eff = [(k - 1) * d + 1 for k, d in zip(spatial, dilations)]
    taps = np.stack(np.meshgrid(*[np.arange(k) * d for k, d in zip(spatial, dilations)], indexing="ij"), -1)
    rest = w.shape[len(dilations):]
    updates = tf.reshape(w, [-1] + list(rest))
    return tf.scatter_nd(taps.reshape(-1, len(dilations)), updates, eff + list(rest))


def run(op, x, w, strides, padding, dilations, split_groups):
    if op == "conv2d":
        if split_groups:  # the form TensorFlow differentiates on the CPU
            conv = lambda a, b: tf.nn.conv2d(a, dilate(b, dilations), strides, padding)  # noqa: E731
            return grouped(conv, x, w)
        return tf.nn.conv2d(x, w, strides, padding, dilations=dilations)
    if op == "depthwise_conv2d":
        return tf.nn.depthwise_conv2d(x, w, [1, strides[0], strides[1], 1], padding, dilations=dilations)
    if split_groups:
        conv = lambda a, b: tf.nn.conv1d(a, dilate(b, dilations), strides[0], padding)  # noqa: E731
        return grouped(conv, x, w)
    return tf.nn.conv1d(x, w, strides[0], padding, dilations=dilations[0])


def line(tag, t):
    print(tag, " ".join(repr(float(v)) for v in tf.reshape(t, [-1]).numpy()))


def main():
    for name, op, xs, ws, strides, padding, dilations in CASES:
        x = pattern(xs, 0.913, 0.3)
        w = pattern(ws, 1.37, 0.1, 0.5, np.cos)
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = run(op, x, w, strides, padding, dilations, True)
            u = pattern(y.shape, 0.37, 0.5, 1.0, np.cos)
            loss = tf.reduce_sum(y * u)
        dx, dw = tape.gradient(loss, [x, w])
        direct = run(op, x, w, strides, padding, dilations, False)
        np.testing.assert_allclose(direct.numpy(), y.numpy(), rtol=1e-12, atol=1e-12)
        fmt = lambda v: ",".join(str(int(d)) for d in v)  # noqa: E731
        print("case", name, op, fmt(xs), fmt(ws), fmt(strides), padding, fmt(dilations))
        line("y", y)
        line("dx", dx)
        line("dw", dw)


if __name__ == "__main__":
    main()
