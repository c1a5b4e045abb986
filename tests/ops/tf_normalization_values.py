"""Prints TensorFlow's values for tests/ops/normalization_ops_test.cc's TfInterop test, one case a
line: `<name> <v1> <v2> ...` (repr of each float). float32 throughout, TF_ENABLE_ONEDNN_OPTS=0
(TF's own Eigen kernels). The inputs are rational formulas of the index that both sides compute
exactly; they and the output weighting must stay the same as in the C++ test:
  x[i] = ((i * 37) % 101) / 10 - 5        (activations: 40 values; norms: [4, 3, 5])
  gamma[j] = 0.5 + ((j * 7) % 5) / 4, beta[j] = ((j * 3) % 4) / 4 - 0.25
  w[i] = ((i * 13) % 7 - 3) / 4          (the gradient is of sum(w * y))
LayerNormalization is tf_keras's (epsilon 1e-3), RMSNormalization Keras 3's ops.rms_normalization."""
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
import keras  # noqa: E402  (Keras 3, for rms_normalization)


def seq(n, f):
    return np.array([f(i) for i in range(n)], dtype=np.float64)


def xs(n):
    return seq(n, lambda i: ((i * 37) % 101) / 10.0 - 5.0)


def ws(n):
    return seq(n, lambda i: ((i * 13) % 7 - 3) / 4.0)


def out(name, t):
    print(name, " ".join(repr(float(v)) for v in np.reshape(np.asarray(t), [-1])))


x = tf.constant(xs(40), tf.float32)
w = tf.constant(ws(40), tf.float32)
for name, f in [("silu", tf.nn.silu), ("leaky_relu", tf.nn.leaky_relu),
                ("leaky_relu_1p5", lambda v: tf.nn.leaky_relu(v, alpha=1.5)), ("elu", tf.nn.elu),
                ("softplus", tf.math.softplus)]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
        loss = tf.reduce_sum(w * y)
    out(name, y)
    out(name + "_grad", tape.gradient(loss, x))

shape = [4, 3, 5]
xn = tf.constant(np.reshape(xs(60), shape), tf.float32)
wn = tf.constant(np.reshape(ws(60), shape), tf.float32)
for name, axis in [("layer_norm", -1), ("layer_norm_2axes", [-2, -1])]:
    ln = tf_keras.layers.LayerNormalization(axis=axis, epsilon=1e-3)
    ln.build(shape)
    n = int(np.prod(ln.gamma.shape))
    ln.gamma.assign(np.reshape(seq(n, lambda j: 0.5 + ((j * 7) % 5) / 4.0), ln.gamma.shape))
    ln.beta.assign(np.reshape(seq(n, lambda j: ((j * 3) % 4) / 4.0 - 0.25), ln.beta.shape))
    with tf.GradientTape() as tape:
        tape.watch(xn)
        y = ln(xn)
        loss = tf.reduce_sum(wn * y)
    gx, gg, gb = tape.gradient(loss, [xn, ln.gamma, ln.beta])
    out(name, y)
    out(name + "_dx", gx)
    out(name + "_dgamma", gg)
    out(name + "_dbeta", gb)

scale = tf.Variable(seq(5, lambda j: 0.5 + ((j * 7) % 5) / 4.0).astype(np.float32))
with tf.GradientTape() as tape:
    tape.watch(xn)
    y = keras.ops.rms_normalization(xn, scale=scale, axis=-1, epsilon=1e-6)
    loss = tf.reduce_sum(wn * y)
gx, gs = tape.gradient(loss, [xn, scale])
out("rms_norm", y)
out("rms_norm_dx", gx)
out("rms_norm_dscale", gs)
