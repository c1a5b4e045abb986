"""Prints TensorFlow's outputs for the NaN/Inf cases of tests/ops/nan_test.cc, one case a line:
`<name> <v1> <v2> ...` (Python's repr of each float: nan, inf, -inf). TF_ENABLE_ONEDNN_OPTS=0:
TensorFlow's own (Eigen) CPU kernels, the reference chorus follows (docs/ops.md, NaN and Inf).
The inputs here and in nan_test.cc's TfInterop test must stay the same."""
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
import tensorflow as tf  # noqa: E402

nan, inf = float("nan"), float("inf")


def out(name, t):
    print(name, " ".join(repr(float(v)) for v in tf.reshape(t, [-1]).numpy()))


x = tf.constant([1.0, nan, -1.0, inf, -inf, 0.0])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.nn.relu(x)
out("relu", y)
out("relu_grad", tape.gradient(y, x))
for name, f in [("silu", tf.nn.silu), ("leaky_relu", tf.nn.leaky_relu), ("elu", tf.nn.elu),
                ("softplus", tf.math.softplus)]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    out(name, y)
    out(name + "_grad", tape.gradient(y, x))

a = tf.constant([nan, 0.0, nan, 1.0, -inf, inf])
b = tf.constant([0.0, nan, nan, inf, nan, 2.0])
with tf.GradientTape(persistent=True) as tape:
    tape.watch([a, b])
    mx, mn = tf.maximum(a, b), tf.minimum(a, b)
out("maximum", mx)
out("minimum", mn)
out("maximum_grad_a", tape.gradient(mx, a))
out("maximum_grad_b", tape.gradient(mx, b))
out("minimum_grad_a", tape.gradient(mn, a))
out("minimum_grad_b", tape.gradient(mn, b))

r = tf.constant([[1.0, nan, 3.0], [1.0, 2.0, 3.0], [-inf, inf, 0.0], [nan, nan, nan], [inf, inf, 1.0],
                 [nan, 5.0, 3.0], [-inf, -inf, -inf], [2.0, nan, 2.0]])
with tf.GradientTape(persistent=True) as tape:
    tape.watch(r)
    rmax, rmin = tf.reduce_max(r, axis=1), tf.reduce_min(r, axis=1)
out("reduce_max", rmax)
out("reduce_min", rmin)
out("reduce_max_grad", tape.gradient(rmax, r))
out("reduce_min_grad", tape.gradient(rmin, r))
out("reduce_sum", tf.reduce_sum(r, axis=1))
out("reduce_mean", tf.reduce_mean(r, axis=1))
ar = tf.constant([[-inf, -inf], [nan, -inf], [-inf, nan], [2.0, nan], [nan, nan], [nan, 5.0], [inf, nan], [nan, inf]])
out("argmax", tf.cast(tf.argmax(tf.concat([ar], 0), axis=1), tf.float32))
out("argmin", tf.cast(tf.argmin(ar, axis=1), tf.float32))
out("argmax_r", tf.cast(tf.argmax(r, axis=1), tf.float32))
out("argmin_r", tf.cast(tf.argmin(r, axis=1), tf.float32))

# Max pooling, 2x2 stride 2: windows {1, NaN, 3, 4}, {-inf x4}, {2, 1, inf, 0}, {5, 6, 7, NaN}.
# No window starts with NaN: there TF's own CPU gradient (MaxPoolGrad) and its oneDNN one differ.
p = tf.reshape(tf.constant([[1.0, nan, -inf, -inf], [3.0, 4.0, -inf, -inf], [2.0, 1.0, 5.0, 6.0],
                            [inf, 0.0, 7.0, nan]]), [1, 4, 4, 1])
with tf.GradientTape() as tape:
    tape.watch(p)
    y = tf.nn.max_pool2d(p, 2, 2, "VALID")
out("max_pool", y)
out("max_pool_grad", tape.gradient(y, p))
# Forward only, overlapping SAME windows, NaN anywhere, a window of NaN only.
q = tf.reshape(tf.constant([[nan, nan, 1.0], [nan, nan, -inf], [2.0, -inf, nan]]), [1, 3, 3, 1])
out("max_pool_same", tf.nn.max_pool2d(q, 2, 1, "SAME"))

s = tf.constant([[1.0, nan, 0.0], [inf, 0.0, 1.0], [-inf, 0.0, 1.0], [inf, inf, 0.0], [-inf, -inf, -inf],
                 [0.0, 1.0, 2.0]])
out("softmax", tf.nn.softmax(s))
out("log_softmax", tf.nn.log_softmax(s))
labels = tf.constant([0, 1, 1, 2, 0, 2])
with tf.GradientTape() as tape:
    tape.watch(s)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=s)
out("xent", loss)
out("xent_grad", tape.gradient(loss, s))
