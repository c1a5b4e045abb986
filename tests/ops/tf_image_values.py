"""Prints TensorFlow's values for tests/ops/image_test.cc's TfInterop tests, one case a line:
`<name> <v1> <v2> ...` (repr of each value as a float; nan/inf as Python prints them). TF 2.21's
own kernels (TF_ENABLE_ONEDNN_OPTS=0). Inputs are formulas of the flat index that the C++ test
computes identically (keep them in sync):
  xs(n)[i]  = ((i * 37) % 101) / 10 - 5           (float inputs, rounded to the dtype)
  u8(n)[i]  = (i * 37) % 256                       (uint8 inputs)
  ws(n)[i]  = ((i * 13) % 7 - 3) / 4               (gradients are of sum(w * y))
  nan/inf cases: xs with element 5 = nan, element 17 = +inf, element 30 = -inf."""
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def xs(shape):
    n = int(np.prod(shape))
    return np.array([((i * 37) % 101) / 10.0 - 5.0 for i in range(n)]).reshape(shape)


def u8(shape):
    n = int(np.prod(shape))
    return np.array([(i * 37) % 256 for i in range(n)], np.uint8).reshape(shape)


def ws(shape):
    n = int(np.prod(shape))
    return np.array([((i * 13) % 7 - 3) / 4.0 for i in range(n)]).reshape(shape)


def nonfinite(shape):
    v = xs(shape).reshape(-1).copy()
    v[5], v[17], v[30] = np.nan, np.inf, -np.inf
    return v.reshape(shape)


def out(name, t):
    a = np.asarray(t.numpy() if hasattr(t, "numpy") else t)
    if a.dtype == tf.bfloat16.as_numpy_dtype:
        a = a.astype(np.float32)
    print(name, " ".join(repr(float(v)) for v in a.reshape(-1)))


def grad(f, x, wshape):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
        loss = tf.reduce_sum(tf.constant(ws(y.shape), y.dtype) * y)
    return tape.gradient(loss, x)


B = [2, 5, 7, 3]
# ---- resize ----
for tag, size in [("up", [11, 13]), ("down", [3, 4]), ("mixed", [9, 4]), ("same", [5, 7])]:
    for method in ["bilinear", "nearest"]:
        x = tf.constant(xs(B), tf.float32)
        out(f"resize_{method}_{tag}", tf.image.resize(x, size, method=method))
        out(f"resize_{method}_{tag}_grad", grad(lambda v: tf.image.resize(v, size, method=method),
                                                xs(B).astype(np.float32), None))
        out(f"resize_{method}_{tag}_f64grad", grad(lambda v: tf.image.resize(v, size, method=method),
                                                   xs(B), None))
        out(f"resize_{method}_{tag}_u8", tf.image.resize(tf.constant(u8(B)), size, method=method))
        out(f"resize_{method}_{tag}_nonfinite", tf.image.resize(tf.constant(nonfinite(B), tf.float32), size,
                                                                method=method))
out("resize_bilinear_3d_f64", tf.image.resize(tf.constant(xs([6, 4, 2])), [8, 3]))
out("resize_bilinear_3d_bf16", tf.image.resize(tf.constant(xs([6, 4, 2]), tf.bfloat16), [8, 3]))
out("resize_nearest_3d_f16", tf.image.resize(tf.constant(xs([6, 4, 2]), tf.float16), [8, 3], method="nearest"))
out("resize_aspect", tf.shape(tf.image.resize(tf.constant(xs(B), tf.float32), [20, 9], preserve_aspect_ratio=True)))
out("resize_big_up", tf.image.resize(tf.constant(xs([1, 17, 23, 2]), tf.float32), [40, 57]))
out("resize_big_down", tf.image.resize(tf.constant(xs([1, 40, 57, 2]), tf.float32), [17, 23]))

# ---- per_image_standardization ----
out("standardize_f32", tf.image.per_image_standardization(tf.constant(xs(B), tf.float32)))
out("standardize_u8", tf.image.per_image_standardization(tf.constant(u8([5, 7, 3]))))
out("standardize_const", tf.image.per_image_standardization(tf.fill([2, 3, 4, 2], 3.0)))
out("standardize_nonfinite", tf.image.per_image_standardization(tf.constant(nonfinite(B), tf.float32)))
out("standardize_grad", grad(tf.image.per_image_standardization, xs(B).astype(np.float32), None))
out("standardize_const_grad", grad(tf.image.per_image_standardization, np.full([2, 3, 4, 2], 3.0, np.float32), None))

# ---- convert_image_dtype: every pair, in-range values; saturate on out-of-range floats ----
# float -> int casts of values outside the integer range (or NaN) are left to the hardware by TF's
# CPU kernel (x86: INT_MIN or wrap-around; e.g. 1.0 -> int32 is 1.0 * 2^31 -> INT_MIN): those
# elements are printed as nan and not compared (ops/image.h promises no value there).
names = ["uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "uint16"]
ints = {"uint8": [0, 1, 7, 128, 200, 254, 255],
        "int32": [0, 1, 5, 255, 65536, -1, -7, -2**31, 2**31 - 1, 123456789],
        "int64": [0, 1, 5, 255, -1, -9, 2**40 + 3, -2**63, 2**63 - 1, 1234567890123456789],
        "uint16": [0, 1, 7, 255, 256, 4660, 32768, 65534, 65535]}
floats = [0.0, 0.25, 0.5, 1.0, 0.999, 0.001, 0.7, 1.0 / 3.0]
RANGE = {"uint8": (-1.0, 256.0), "int32": (-2.0**31 - 1, 2.0**31), "int64": (-2.0**63 - 1, 2.0**63),
         "uint16": (-1.0, 65536.0)}


def convert_case(name, vals, src, dst, sat):
    x = tf.constant(vals, dtype=getattr(tf, src))
    y = tf.image.convert_image_dtype(x, getattr(tf, dst), saturate=sat)
    y = np.asarray(y.numpy().astype(np.float64) if dst != "bfloat16" else y.numpy().astype(np.float32), np.float64)
    if src in RANGE or dst not in RANGE:
        return out(name, y)
    scaled = (x * tf.constant(getattr(tf, dst).max + 0.5, getattr(tf, src))).numpy().astype(np.float64)
    lo, hi = RANGE[dst]
    if sat:  # TF's clip keeps NaN; float32/float64/bfloat16 -> int64 clips to 2^63, itself out of range
        bad = np.isnan(scaled) | ((dst == "int64") & (src != "float16") & (scaled >= hi))
    else:
        bad = np.isnan(scaled) | (scaled <= lo) | (scaled >= hi)
    out(name, np.where(bad, np.nan, y))


for src in names:
    for dst in names:
        for sat in [False, True]:
            convert_case(f"convert_{src}_{dst}_{int(sat)}", ints.get(src, floats), src, dst, sat)
for src in ["float16", "bfloat16", "float32", "float64"]:
    for dst in ["uint8", "int32", "int64", "uint16"]:
        vals = [-2.0, -0.5, 1.5, 3e4, -3e4, 1e30 if src != "float16" else 6e4, np.inf, -np.inf, np.nan]
        convert_case(f"convert_sat_{src}_{dst}", vals, src, dst, True)

# ---- crops and flips (stateless: exact) ----
for seed in [(1, 2), (7, 0), (123456789, -5)]:
    s = f"{seed[0]}_{seed[1]}"
    out(f"crop3_{s}", tf.image.stateless_random_crop(tf.constant(xs([6, 7, 3]), tf.float32), [4, 5, 3], seed=seed))
    out(f"crop4_{s}", tf.image.stateless_random_crop(tf.constant(u8([3, 6, 7, 2])), [2, 3, 2, 2], seed=seed))
    out(f"flip_lr3_{s}", tf.image.stateless_random_flip_left_right(tf.constant(xs([4, 5, 2]), tf.float32), seed))
    out(f"flip_ud3_{s}", tf.image.stateless_random_flip_up_down(tf.constant(xs([4, 5, 2]), tf.float32), seed))
    out(f"flip_lr4_{s}", tf.image.stateless_random_flip_left_right(tf.constant(xs([6, 4, 5, 2]), tf.float32), seed))
    out(f"flip_ud4_{s}", tf.image.stateless_random_flip_up_down(tf.constant(u8([6, 4, 5, 2])), seed))
    out(f"flip_lr4_nonfinite_{s}",
        tf.image.stateless_random_flip_left_right(tf.constant(nonfinite([6, 4, 5, 2]), tf.float32), seed))
for frac in [0.5, 0.33, 0.9, 0.05]:
    out(f"central_{frac}", tf.image.central_crop(tf.constant(xs([2, 7, 9, 2]), tf.float32), frac))
out("crop_box", tf.image.crop_to_bounding_box(tf.constant(xs([7, 9, 2]), tf.float32), 2, 3, 4, 5))
out("pad_box", tf.image.pad_to_bounding_box(tf.constant(xs([2, 3, 4, 2]), tf.float32), 1, 2, 5, 7))
