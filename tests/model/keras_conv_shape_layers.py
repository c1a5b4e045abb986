"""Prints tf_keras's outputs of the layers of tests/model/conv_shape_layers_test.cc (its
KerasInterop test builds the same layers, by the same case names, in chorus).

For each case: `case <name> <output shape, comma-separated>` then `y <values>` (float64 repr).
Inputs and weights are closed forms over the flat row-major index i, as in the C++ test:
  x[i] = sin(0.913 i + 0.3), kernel[i] = 0.5 cos(1.37 i + 0.1), bias[i] = 0.1 sin(0.7 i)."""
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

L = keras.layers
keras.backend.set_floatx("float64")  # before the layers: they take it when constructed


def closed(shape, a, b, scale, fn):
    i = np.arange(int(np.prod(shape)), dtype=np.float64)
    return (scale * fn(a * i + b)).reshape(shape)


def kernel_init(shape, dtype=None):
    return tf.constant(closed(shape, 1.37, 0.1, 0.5, np.cos), dtype=dtype)


def bias_init(shape, dtype=None):
    return tf.constant(closed(shape, 0.7, 0.0, 0.1, np.sin), dtype=dtype)


W = dict(kernel_initializer=kernel_init, bias_initializer=bias_init)
DW = dict(depthwise_initializer=kernel_init, bias_initializer=bias_init)

CASES = [
    ("conv2d_groups2_same_relu", [2, 6, 5, 4], L.Conv2D(6, 3, padding="same", groups=2, activation="relu", **W)),
    ("conv2d_groups4_valid_stride2x1", [1, 7, 6, 4],
     L.Conv2D(4, (3, 2), strides=(2, 1), groups=4, use_bias=False, **W)),
    ("depthwise_m2_stride2_same_tanh", [2, 6, 6, 3],
     L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2, activation="tanh", **DW)),
    ("depthwise_dilated_valid", [1, 6, 5, 4], L.DepthwiseConv2D(2, dilation_rate=2, **DW)),
    ("conv1d_causal_dilated_relu", [2, 9, 4],
     L.Conv1D(5, 3, padding="causal", dilation_rate=2, activation="relu", **W)),
    ("conv1d_same_stride2_groups2", [2, 9, 4], L.Conv1D(6, 3, strides=2, padding="same", groups=2, **W)),
    ("zero_padding_int", [1, 2, 3, 2], L.ZeroPadding2D(1)),
    ("zero_padding_pair", [1, 2, 3, 2], L.ZeroPadding2D((1, 2))),
    ("zero_padding_tuples", [1, 2, 3, 2], L.ZeroPadding2D(((1, 0), (2, 3)))),
    ("global_average", [2, 3, 4, 5], L.GlobalAveragePooling2D()),
    ("global_average_keepdims", [2, 3, 4, 5], L.GlobalAveragePooling2D(keepdims=True)),
    ("global_max", [2, 3, 4, 5], L.GlobalMaxPooling2D()),
    ("global_max_keepdims", [2, 3, 4, 5], L.GlobalMaxPooling2D(keepdims=True)),
    ("reshape_inferred", [2, 3, 4, 2], L.Reshape((-1, 4))),
    ("reshape_inferred_middle", [2, 3, 4, 2], L.Reshape((2, -1, 3))),
    ("reshape_full", [2, 3, 4, 2], L.Reshape((4, 3, 2))),
    ("permute_312", [2, 3, 4, 5], L.Permute((3, 1, 2))),
    ("permute_21", [2, 3, 4], L.Permute((2, 1))),
]


def main():
    for name, shape, layer in CASES:
        x = tf.constant(closed(shape, 0.913, 0.3, 1.0, np.sin))
        y = layer(x)
        print("case", name, ",".join(str(d) for d in y.shape))
        print("y", " ".join(repr(float(v)) for v in tf.reshape(y, [-1]).numpy()))


if __name__ == "__main__":
    main()
