"""TensorFlow's side of tests/checkpoint/tensorflow_interop_test.cc.

Run by those tests with the interop Python (tests/core/interop_python.h: the venv of
tests/interop/requirements.txt — tensorflow-cpu, tf_keras, keras 3, tensorboard, numpy). Every
mode does all its work in this one process (importing TensorFlow takes seconds) and prints one
line per check; it exits 0 only when every check passed, 1 otherwise, 2 on bad usage.

Arrays travel between C++ and Python as a "dump": a directory with `manifest.tsv` (lines
"key<TAB>dtype<TAB>d0,d1,...<TAB>file", dtype as numpy/TF name it: float32, bfloat16, bool, ...)
and one raw little-endian, row-major file per array.

  chorus-wrote DIR           (chorus wrote) for every case DIR/<case>/ (a file `prefix` naming the
                             checkpoint, a dump `expected/` of every value chorus saved):
                             tf.train.list_variables lists exactly those keys (plus the object
                             graph) with their shapes and dtypes; tf.train.load_checkpoint reads
                             every value bit for bit; object-based restore into matching TF objects
                             (case-specific, see chorus_wrote) consumes the checkpoint.
  chorus-wrote-sharded DIR   (chorus wrote, every replica or worker its own shards as TF slices)
                             DIR/prefix, DIR/data_files (how many .data-K-of-N files), a dump
                             DIR/expected/: the data files are exactly those N, list_variables and
                             load_checkpoint read every full tensor bit for bit, and
                             tf.train.Checkpoint(<name>=tf.Variable) restores every one with
                             assert_consumed().
  keras-restores DIR         (chorus wrote) DIR/seq: a tf_keras Sequential Dense(3)-Dropout-Dense(2)
                             restores chorus's Sequential (layer_with_weights-N keys). DIR/cnn: the
                             seed CNN with tf_keras.optimizers.legacy.Adam restores chorus's
                             {model, optimizer} checkpoint with assert_consumed(); weights, Adam's
                             m and v slots and iterations equal chorus's bit for bit, the restored
                             model's logits on chorus's input equal chorus's logits, and one more
                             train_on_batch lands where chorus's next step did (DIR/cnn/after).
  keras-restores-lso DIR     (chorus wrote) DIR/lso: {optimizer: LossScaleOptimizer(Adam), w}. tf_keras's
                             LossScaleOptimizer around its legacy Adam restores it with
                             assert_consumed(); w, m, v, iterations, the loss scale and good_steps
                             equal chorus's bit for bit, and one more apply_gradients of
                             DIR/lso/next_gradient lands where chorus's did (DIR/lso/after).
  keras-restores-mixed DIR   (chorus wrote) DIR/mixed: the seed CNN built under the mixed_bfloat16
                             policy (its last Dense float32), trained with LossScaleOptimizer(Adam).
                             tf_keras under mixed_bfloat16, the same model, restores it with
                             assert_consumed(): float32 weights, slots, iterations, loss scale and
                             good_steps bit for bit; logits on chorus's input within bfloat16
                             rounding; one more train_on_batch moves every variable the way
                             chorus's step did (cosine of the updates >= 0.95; DIR/mixed/after).
  tf-writes DIR              (TF writes) DIR/nested (nested tf.Module with lists, dicts and names
                             that need escaping), DIR/dtypes (a tf.Variable of each of the 16
                             dtypes TF saves), DIR/big (one float32 variable of 100 MiB),
                             DIR/per_tensor_shards (a ShardingCallback putting each tensor in its
                             own .data-K-of-N file), DIR/max_shard (MaxShardSizePolicy: tensors
                             sliced over several data files), DIR/slices (SaveV2 with 2-D
                             slices). Each gets `prefix` and a dump `values/` of what TF saved.
  keras-writes DIR           (TF writes) the seed CNN trained a few steps with Adam, saved with
                             tf.train.Checkpoint(model=, optimizer=).write: DIR/k2legacy
                             (tf_keras + tf_keras.optimizers.legacy.Adam, chorus's layout),
                             DIR/k2 (tf_keras + its default Adam: slots under
                             optimizer/_variables/N), DIR/k3 (Keras 3). Each gets `prefix`, a dump
                             `values/` keyed by checkpoint key (taken from the live objects, not
                             from the file), a dump `io/` (a batch x, y and the model's logits on
                             x), and k2legacy a dump `after/` of weights, slots and iterations
                             after one more train_on_batch(x, y).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402

tf = None  # imported by main(), once the arguments are known to be good

VAR = "/.ATTRIBUTES/VARIABLE_VALUE"
GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"
BIG_SHAPE = (6400, 4096)  # float32: 104,857,600 bytes (100 MiB)


class Checks:
    """Counts checks; prints each failure (and a summary) and gives the exit code."""

    def __init__(self):
        self.n = 0
        self.failed = []

    def check(self, ok, what):
        self.n += 1
        if not ok:
            self.failed.append(what)
            print("FAIL:", what, flush=True)
        return ok

    def equal_bits(self, got, want, what):
        got, want = np.asarray(got), np.asarray(want)
        ok = got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
        if not ok:
            detail = f"{got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
            if got.shape == want.shape and got.dtype == want.dtype and got.size:
                diff = np.flatnonzero(got.reshape(-1).view(np.uint8) != want.reshape(-1).view(np.uint8))
                detail += f", first differing byte {diff[0] if diff.size else '?'}: got {got.reshape(-1)[:6]}, want {want.reshape(-1)[:6]}"
            return self.check(False, f"{what}: {detail}")
        return self.check(True, what)

    def done(self, mode):
        print(f"{mode}: {self.n} checks, {len(self.failed)} failed (TF {tf.__version__})", flush=True)
        return 0 if not self.failed and self.n > 0 else 1


# ---- dumps ----

def np_dtype(name):
    if name == "bfloat16":
        return tf.bfloat16.as_numpy_dtype
    return np.dtype(name)


def write_dump(path, items):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "manifest.tsv"), "w") as m:
        for i, (key, value) in enumerate(items):
            a = np.asarray(value)  # (np.ascontiguousarray would make a scalar 1-D)
            a = a if a.flags.c_contiguous else a.copy(order="C")
            name = f"{i}.bin"
            with open(os.path.join(path, name), "wb") as f:
                f.write(a.tobytes())
            m.write(f"{key}\t{a.dtype.name}\t{','.join(str(d) for d in a.shape)}\t{name}\n")


def read_dump(path):
    out = {}
    with open(os.path.join(path, "manifest.tsv")) as m:
        for line in m:
            if not line.strip():
                continue
            key, dtype, dims, name = line.rstrip("\n").split("\t")
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
            with open(os.path.join(path, name), "rb") as f:
                out[key] = np.frombuffer(f.read(), dtype=np_dtype(dtype)).reshape(shape)
    return out


def big_values():
    """The 100 MiB variable's values, also computed by the C++ tests: exact in float32."""
    i = np.arange(BIG_SHAPE[0] * BIG_SHAPE[1], dtype=np.int64)
    return (((i * 2654435761) % 65536 - 32768).astype(np.float32) * np.float32(0.125)).reshape(BIG_SHAPE)


# ---- chorus wrote, TF reads ----

def check_listing_and_values(c, case, prefix, expected):
    """list_variables and load_checkpoint against the dump of what chorus saved."""
    listed = dict(tf.train.list_variables(prefix))
    want_keys = set(expected) | {GRAPH}
    c.check(set(listed) == want_keys,
            f"{case}: list_variables keys: extra {sorted(set(listed) - want_keys)[:5]}, "
            f"missing {sorted(want_keys - set(listed))[:5]}")
    reader = tf.train.load_checkpoint(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    for key, want in sorted(expected.items()):
        if key not in listed:
            continue
        c.check(list(listed[key]) == list(want.shape), f"{case}: {key} shape {listed[key]} vs {list(want.shape)}")
        c.check(dtypes[key].name == want.dtype.name, f"{case}: {key} dtype {dtypes[key].name} vs {want.dtype.name}")
        c.equal_bits(reader.get_tensor(key), want, f"{case}: {key} value")
    return reader


def restore_dtypes(c, prefix, expected):
    """Object-based restore of chorus's one-variable-per-dtype checkpoint into tf.Variables."""
    vs = {}
    for key, want in expected.items():
        name = key[: -len(VAR)]
        vs[name] = tf.Variable(tf.zeros(want.shape, tf.as_dtype(want.dtype)))
    ckpt = tf.train.Checkpoint(**vs)
    ckpt.read(prefix).assert_consumed()
    for name, v in vs.items():
        c.equal_bits(v.numpy(), expected[name + VAR], f"dtypes: restored tf.Variable {name}")


def restore_nested(c, prefix, expected):
    """chorus's nested objects (tensorflow_interop_test.cc, ChorusWritesTensorFlowReads), saved with
    Checkpoint.save: restore() (which also takes save_counter) into the same structure of tf.Modules,
    a dict (keys "a/b" and "x.y", escaped in the keys) and a list."""
    def var(path):
        want = expected[path + VAR]
        return tf.Variable(tf.zeros(want.shape, tf.as_dtype(want.dtype)))

    net = tf.Module()
    net.w = var("net/w")
    outer = tf.Module()
    outer.inner = tf.Module()
    outer.inner.deep = tf.Module()
    outer.inner.deep.w = var("outer/inner/deep/w")
    outer.table = {"a/b": var("outer/table/a.Sb"), "x.y": var("outer/table/x..y")}
    outer.items = [var("outer/items/0"), tf.Module()]
    outer.items[1].bias = var("outer/items/1/bias")
    ckpt = tf.train.Checkpoint(v=var("v"), step=var("step"), net=net, outer=outer)
    ckpt.restore(prefix).assert_consumed()
    got = {"v": ckpt.v, "step": ckpt.step, "net/w": net.w, "outer/inner/deep/w": outer.inner.deep.w,
           "outer/table/a.Sb": outer.table["a/b"], "outer/table/x..y": outer.table["x.y"],
           "outer/items/0": outer.items[0], "outer/items/1/bias": outer.items[1].bias,
           "save_counter": ckpt.save_counter}
    for path, v in got.items():
        c.equal_bits(v.numpy(), expected[path + VAR], f"nested: restored {path}")


def restore_big(c, prefix, expected):
    v = tf.Variable(tf.zeros(BIG_SHAPE, tf.float32))
    tf.train.Checkpoint(big=v).read(prefix).assert_consumed()
    c.check(np.array_equal(v.numpy(), big_values()), "big: restored 100 MiB tf.Variable equals the formula")


def chorus_wrote(root):
    c = Checks()
    restorers = {"dtypes": restore_dtypes, "nested": restore_nested, "big": restore_big}
    cases = sorted(os.listdir(root))
    c.check(set(restorers) <= set(cases), f"cases present: {cases}")
    for case in cases:
        with open(os.path.join(root, case, "prefix")) as f:
            prefix = f.read().strip()
        # The 100 MiB values are not dumped: both sides compute them (big_values()).
        expected = {"big" + VAR: big_values()} if case == "big" else read_dump(os.path.join(root, case, "expected"))
        check_listing_and_values(c, case, prefix, expected)
        if case in restorers:
            restorers[case](c, prefix, expected)
    return c.done("chorus-wrote")


def chorus_wrote_sharded(root):
    c = Checks()
    with open(os.path.join(root, "prefix")) as f:
        prefix = f.read().strip()
    with open(os.path.join(root, "data_files")) as f:
        n = int(f.read())
    base = os.path.basename(prefix)
    files = sorted(x for x in os.listdir(os.path.dirname(prefix)) if x.startswith(base + ".data-"))
    want = [f"{base}.data-{k:05d}-of-{n:05d}" for k in range(n)]
    c.check(files == want, f"sharded: data files {files} vs {want}")
    expected = read_dump(os.path.join(root, "expected"))
    check_listing_and_values(c, "sharded", prefix, expected)
    vs = {}
    for key, value in expected.items():
        vs[key[: -len(VAR)]] = tf.Variable(tf.zeros(value.shape, tf.as_dtype(value.dtype)))
    tf.train.Checkpoint(**vs).read(prefix).assert_consumed()
    for name, v in vs.items():
        c.equal_bits(v.numpy(), expected[name + VAR], f"sharded: restored tf.Variable {name}")
    return c.done("chorus-wrote-sharded")


# ---- the seed CNN ----

def seed_cnn(K):
    """examples/mnist_mirrored.cc's model in Keras (tf_keras or Keras 3)."""
    L = K.layers
    return K.Sequential([K.Input((28, 28, 1)), L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(2),
                         L.Conv2D(64, 3, activation="relu"), L.MaxPooling2D(2), L.Conv2D(64, 3, activation="relu"),
                         L.Flatten(), L.Dense(64, activation="relu"), L.Dense(10)])


def close(c, got, want, rtol, what):
    """max |got - want| <= rtol * max |want| (iterations: equal)."""
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype != np.float32:
        return c.check(np.array_equal(got, want), f"{what}: {got} vs {want}")
    diff = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return c.check(got.shape == want.shape and diff <= rtol * scale + 1e-12,
                   f"{what}: max |diff| {diff:.3g}, max |value| {scale:.3g}")


def legacy_keys(model, opt):
    """(checkpoint key, live value) for the Keras 2 layout: weights, m/v slots, iterations."""
    out = []
    with_weights = [layer for layer in model.layers if layer.weights]
    for i, layer in enumerate(with_weights):
        for w, short in zip(layer.weights, ("kernel", "bias")):
            base = f"model/layer_with_weights-{i}/{short}"
            out.append((base + VAR, w.numpy()))
            for slot in ("m", "v"):
                out.append((f"{base}/.OPTIMIZER_SLOT/optimizer/{slot}{VAR}", opt.get_slot(w, slot).numpy()))
    out.append(("optimizer/iter" + VAR, np.array(opt.iterations.numpy(), np.int64)))
    return out


def batch(seed):
    r = np.random.RandomState(seed)
    return r.rand(16, 28, 28, 1).astype(np.float32), (np.arange(16) % 10).astype(np.int32)


def keras_restores(root):
    import tf_keras as K

    c = Checks()
    # Dense(3) -> Dropout -> Dense(2), restored by layer_with_weights-N (model only).
    seq_dir = os.path.join(root, "seq")
    with open(os.path.join(seq_dir, "prefix")) as f:
        prefix = f.read().strip()
    want = read_dump(os.path.join(seq_dir, "expected"))
    m = K.Sequential([K.layers.Dense(3, input_shape=(4,)), K.layers.Dropout(0.1), K.layers.Dense(2)])
    tf.train.Checkpoint(model=m).read(prefix).assert_consumed()
    names = ["layer_with_weights-0/kernel", "layer_with_weights-0/bias", "layer_with_weights-1/kernel",
             "layer_with_weights-1/bias"]
    for name, w in zip(names, m.get_weights()):
        c.equal_bits(w, want[f"model/{name}{VAR}"], f"seq: tf_keras {name}")

    # The seed CNN and legacy Adam: everything chorus saved is consumed, every TF object matched.
    cnn_dir = os.path.join(root, "cnn")
    with open(os.path.join(cnn_dir, "prefix")) as f:
        prefix = f.read().strip()
    want = read_dump(os.path.join(cnn_dir, "expected"))
    model = seed_cnn(K)
    opt = K.optimizers.legacy.Adam(1e-3)
    opt._create_slots(model.trainable_variables)  # slots exist, so they restore at once
    _ = opt.iterations
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    ckpt.restore(prefix).assert_consumed()
    c.check(True, "cnn: tf.train.Checkpoint(model=, optimizer=).restore(...).assert_consumed()")
    got = dict(legacy_keys(model, opt))
    counter = want.pop("save_counter" + VAR)
    c.check(int(ckpt.save_counter.numpy()) == int(counter), f"cnn: save_counter {ckpt.save_counter.numpy()}")
    c.check(set(got) == set(want), f"cnn: tf_keras vs chorus keys: {sorted(set(got) ^ set(want))[:6]}")
    for key in sorted(set(got) & set(want)):
        c.equal_bits(got[key], want[key], f"cnn: restored {key}")
    io = read_dump(os.path.join(cnn_dir, "io"))
    logits = model(io["x"], training=False).numpy()
    err = float(np.max(np.abs(logits - io["logits"])))
    c.check(err <= 1e-4 * max(1.0, float(np.max(np.abs(io["logits"])))),
            f"cnn: tf_keras logits equal chorus's on the same input (max |diff| {err:.3g})")
    # Training goes on from chorus's state: one step on the batch chorus took its next step on.
    model.compile(optimizer=opt, loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.train_on_batch(io["x"], io["y"])
    after = read_dump(os.path.join(cnn_dir, "after"))
    for key, value in legacy_keys(model, opt):
        close(c, value, after[key], 1e-4, f"cnn: after one more step: {key}")
    return c.done("keras-restores")


def keras_restores_lso(root):
    import tf_keras as K

    c = Checks()
    d = os.path.join(root, "lso")
    with open(os.path.join(d, "prefix")) as f:
        prefix = f.read().strip()
    want = read_dump(os.path.join(d, "expected"))
    w = tf.Variable(np.zeros(3, np.float32), name="w")
    opt = K.mixed_precision.LossScaleOptimizer(K.optimizers.legacy.Adam(0.01), initial_scale=1.0,
                                               dynamic_growth_steps=5)
    opt.inner_optimizer._create_slots([w])  # slots exist, so they restore at once
    _ = opt.iterations

    def state():
        return {"w" + VAR: w.numpy(),
                "w/.OPTIMIZER_SLOT/optimizer/m" + VAR: opt.inner_optimizer.get_slot(w, "m").numpy(),
                "w/.OPTIMIZER_SLOT/optimizer/v" + VAR: opt.inner_optimizer.get_slot(w, "v").numpy(),
                "optimizer/iter" + VAR: np.array(opt.iterations.numpy(), np.int64),
                "optimizer/loss_scale/current_loss_scale" + VAR: np.array(opt.loss_scale.numpy(), np.float32),
                "optimizer/loss_scale/good_steps" + VAR: np.array(opt.dynamic_counter.numpy(), np.int64)}

    tf.train.Checkpoint(optimizer=opt, w=w).read(prefix).assert_consumed()
    c.check(True, "lso: tf.train.Checkpoint(optimizer=LossScaleOptimizer(legacy Adam), w=).read(...).assert_consumed()")
    got = state()
    c.check(set(got) == set(want), f"lso: tf_keras vs chorus keys: {sorted(set(got) ^ set(want))}")
    for key in sorted(set(got) & set(want)):
        c.equal_bits(got[key], want[key], f"lso: restored {key}")
    g = read_dump(os.path.join(d, "next_gradient"))["g"]
    # As a training step would: the gradient of the scaled loss, unscaled (exact: the scale is 2^9).
    unscaled = opt.get_unscaled_gradients([tf.constant(g) * opt.loss_scale])
    opt.apply_gradients([(unscaled[0], w)])
    after = read_dump(os.path.join(d, "after"))
    for key, value in state().items():
        if after[key].dtype.kind == "f":
            close(c, value, after[key], 1e-5, f"lso: after one more step: {key}")
        else:
            c.equal_bits(value, after[key], f"lso: after one more step: {key}")
    return c.done("keras-restores-lso")


def keras_restores_mixed(root):
    import tf_keras as K

    c = Checks()
    d = os.path.join(root, "mixed")
    with open(os.path.join(d, "prefix")) as f:
        prefix = f.read().strip()
    want = read_dump(os.path.join(d, "expected"))
    K.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        L = K.layers
        model = K.Sequential([K.Input((28, 28, 1)), L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(2),
                              L.Conv2D(64, 3, activation="relu"), L.MaxPooling2D(2),
                              L.Conv2D(64, 3, activation="relu"), L.Flatten(), L.Dense(64, activation="relu"),
                              L.Dense(10, dtype="float32")])
    finally:
        K.mixed_precision.set_global_policy("float32")
    c.check(model.layers[0].compute_dtype == "bfloat16" and model.layers[0].weights[0].dtype == tf.float32,
            "mixed: tf_keras layers compute in bfloat16 with float32 variables")
    opt = K.mixed_precision.LossScaleOptimizer(K.optimizers.legacy.Adam(1e-3))
    opt.inner_optimizer._create_slots(model.trainable_variables)
    _ = opt.iterations

    def state():
        out = dict(legacy_keys(model, opt.inner_optimizer))
        out["optimizer/iter" + VAR] = np.array(opt.iterations.numpy(), np.int64)
        out["optimizer/loss_scale/current_loss_scale" + VAR] = np.array(opt.loss_scale.numpy(), np.float32)
        out["optimizer/loss_scale/good_steps" + VAR] = np.array(opt.dynamic_counter.numpy(), np.int64)
        return out

    tf.train.Checkpoint(model=model, optimizer=opt).read(prefix).assert_consumed()
    c.check(True, "mixed: tf.train.Checkpoint(model=, optimizer=LossScaleOptimizer).read(...).assert_consumed()")
    got = state()
    c.check(set(got) == set(want), f"mixed: tf_keras vs chorus keys: {sorted(set(got) ^ set(want))[:6]}")
    for key in sorted(set(got) & set(want)):
        c.equal_bits(got[key], want[key], f"mixed: restored {key}")
    io = read_dump(os.path.join(d, "io"))
    logits = model(io["x"], training=False).numpy()
    c.check(logits.dtype == np.float32, f"mixed: the float32 output layer gives float32 logits ({logits.dtype})")
    # Both sides compute in bfloat16 (8 significant bits) and round at different points.
    close(c, logits, io["logits"], 2e-2, "mixed: tf_keras logits vs chorus's on the same input")
    model.compile(optimizer=opt, loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.train_on_batch(io["x"], io["y"])
    after = read_dump(os.path.join(d, "after"))
    cosines = []
    for key, value in state().items():
        if after[key].dtype.kind != "f" or "loss_scale" in key:
            c.equal_bits(value, after[key], f"mixed: after one more step: {key}")
            continue
        # Both sides' bfloat16 backward passes round at different points, so their gradients
        # differ by a few percent of their largest elements; the step each side took from the
        # restored state must still point the same way: the cosine of the two updates.
        mine = (value.astype(np.float64) - want[key]).ravel()
        theirs = (after[key].astype(np.float64) - want[key]).ravel()
        cos = float(mine @ theirs / max(np.linalg.norm(mine) * np.linalg.norm(theirs), 1e-300))
        cosines.append(cos)
        c.check(cos >= 0.95, f"mixed: after one more step: {key}: cosine of the updates {cos:.4f}")
    print(f"mixed: cosine of tf_keras's and chorus's updates: min {min(cosines):.4f} over {len(cosines)} tensors",
          flush=True)
    return c.done("keras-restores-mixed")


# ---- TF writes, chorus reads ----

def dtype_values():
    """One array per dtype tf.train.Checkpoint can save, with each type's edge values."""
    inf, nan = np.inf, np.nan
    floats = [0.0, -0.0, 1.5, -2.25, inf, -inf, nan, 1e-3]
    ints = {t: np.iinfo(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)}
    v = {
        "float16": np.array(floats + [65504.0, 6e-8], np.float16).reshape(2, 5),
        "bfloat16": np.array(floats + [3.0e38, 1e-40], tf.bfloat16.as_numpy_dtype).reshape(2, 5),
        "float32": np.array(floats + [3.4028235e38, 1e-45], np.float32).reshape(2, 5),
        "float64": np.array(floats + [1.7976931348623157e308, 5e-324], np.float64).reshape(2, 5),
        "bool": np.array([True, False, True, True, False, False], np.bool_).reshape(3, 2),
        "complex64": np.array([1 + 2j, -3.5 - 0j, complex(inf, nan)], np.complex64),
        "complex128": np.array([1 + 2j, -3.5 - 0j, complex(inf, nan)], np.complex128),
    }
    for t, info in ints.items():
        v[np.dtype(t).name] = np.array([info.min, 0, 1, info.max, info.max // 3], t)
    return v


STRINGS = [b"alpha", b"", b"with\x00nul", "\u00fcber".encode()]  # also in tensorflow_interop_test.cc


def per_tensor_policy():
    class OneShardPerTensor(tf.train.experimental.ShardingCallback):
        """Whole tensors, one data file each (a user-written sharding policy)."""

        @property
        def description(self):
            return "one shard per tensor"

        def __call__(self, shardable_tensors):
            return [{t.checkpoint_key: {t.slice_spec: t.tensor}} for t in shardable_tensors]

    return OneShardPerTensor()


def tf_writes(root):
    c = Checks()

    def save(case, ckpt, values, options=None):
        d = os.path.join(root, case)
        os.makedirs(d, exist_ok=True)
        path = ckpt.write(os.path.join(d, "ckpt"), options=options)
        with open(os.path.join(d, "prefix"), "w") as f:
            f.write(path)
        write_dump(os.path.join(d, "values"), values)
        return d

    # (b) nested tf.Module: modules in modules, a list, a dict whose keys need escaping.
    net = tf.Module()
    net.w = tf.Variable([1.5, -2.5], dtype=tf.float32)
    outer = tf.Module()
    outer.inner = tf.Module()
    outer.inner.deep = tf.Module()
    outer.inner.deep.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4) / 7)
    outer.table = {"a/b": tf.Variable(np.array([7, 8, 9], np.int64)), "x.y": tf.Variable(np.float64(-0.5))}
    outer.items = [tf.Variable(np.array([[True], [False]])), tf.Module()]
    outer.items[1].bias = tf.Variable(np.array([0.25, 0.5], np.float16))
    ckpt = tf.train.Checkpoint(v=tf.Variable(np.arange(6, dtype=np.float64).reshape(2, 3)),
                               step=tf.Variable(tf.constant(7, tf.int64)),
                               ids=tf.Variable(tf.constant([3, 1, 2], tf.int32)), net=net, outer=outer)
    values = [("v", ckpt.v), ("step", ckpt.step), ("ids", ckpt.ids), ("net/w", net.w),
              ("outer/inner/deep/w", outer.inner.deep.w), ("outer/table/a.Sb", outer.table["a/b"]),
              ("outer/table/x..y", outer.table["x.y"]), ("outer/items/0", outer.items[0]),
              ("outer/items/1/bias", outer.items[1].bias)]
    save("nested", ckpt, [(k + VAR, v.numpy()) for k, v in values])
    listed = dict(tf.train.list_variables(os.path.join(root, "nested", "ckpt")))
    c.check(set(listed) == {k + VAR for k, _ in values} | {GRAPH}, f"nested: TF's own keys {sorted(listed)}")

    # (c) every dtype TF saves.
    vals = dtype_values()
    vs = {name: tf.Variable(a) for name, a in vals.items()}
    vs["string"] = tf.Variable(STRINGS)
    save("dtypes", tf.train.Checkpoint(**vs), [(n + VAR, a) for n, a in vals.items()])
    dt = tf.train.load_checkpoint(os.path.join(root, "dtypes", "ckpt")).get_variable_to_dtype_map()
    c.check(len(dt) == 17, f"dtypes: TF saved {len(dt)} entries (16 dtypes + the object graph): {sorted(dt)}")
    for name, a in vals.items():
        c.check(dt[name + VAR].name == name, f"dtypes: TF saved {name} as {dt[name + VAR].name}")

    # (d) one variable of 100 MiB.
    big = tf.Variable(big_values())
    d = save("big", tf.train.Checkpoint(big=big), [])
    c.check(os.path.getsize(os.path.join(d, "ckpt.data-00000-of-00001")) >= 100 * 2**20, "big: data file >= 100 MiB")
    del big

    # (e) several data files: whole tensors one per file, and MaxShardSizePolicy's slices.
    def shard_vars():
        return {"a": tf.Variable(np.arange(300 * 7, dtype=np.float32).reshape(300, 7) / 3),
                "b": tf.Variable(np.arange(4 * 5 * 6, dtype=np.int64).reshape(4, 5, 6) * -3),
                "c": tf.Variable(np.arange(1000) % 3 == 0),
                "d": tf.Variable(np.linspace(-4, 4, 333).astype(np.float16)),
                "e": tf.Variable(np.linspace(-8, 8, 257).astype(tf.bfloat16.as_numpy_dtype)),
                "s": tf.Variable(np.float64(3.25))}

    for case, policy in (("per_tensor_shards", per_tensor_policy()),
                         ("max_shard", tf.train.experimental.MaxShardSizePolicy(max_shard_size=700))):
        vs = shard_vars()
        d = save(case, tf.train.Checkpoint(**vs), [(k + VAR, v.numpy()) for k, v in vs.items()],
                 tf.train.CheckpointOptions(experimental_sharding_callback=policy))
        files = sorted(f for f in os.listdir(d) if ".data-" in f)
        n = len(files)
        c.check(n >= 3 and all(f == f"ckpt.data-{k:05d}-of-{n:05d}" for k, f in enumerate(files)),
                f"{case}: data files {files}")
        r = tf.train.load_checkpoint(os.path.join(d, "ckpt"))
        for k, v in vs.items():
            try:
                c.equal_bits(r.get_tensor(k + VAR), v.numpy(), f"{case}: TF reads its own {k}")
            except ValueError as e:
                # TF's BundleReader::GetSliceValue copies slices of a fixed list of types, without
                # half: TF cannot read back a float16 tensor it sliced (chorus can).
                c.check(case == "max_shard" and k == "d" and "Dtype half not supported" in str(e),
                        f"{case}: TF reads its own {k}: {e}")
                print(f"note: TF {tf.__version__} cannot read its own sliced float16 tensor: {e}")

    # 2-D slices (as a partitioned variable's saver writes them), without an object graph.
    x = np.arange(24, dtype=np.float32).reshape(4, 6) - 11.5
    d = os.path.join(root, "slices")
    os.makedirs(d, exist_ok=True)
    tf.raw_ops.SaveV2(prefix=os.path.join(d, "ckpt"), tensor_names=["w" + VAR] * 3,
                      shape_and_slices=["4 6 0,2:0,4", "4 6 2,2:-", "4 6 0,2:4,2"],
                      tensors=[x[0:2, 0:4], x[2:4, :], x[0:2, 4:6]])
    with open(os.path.join(d, "prefix"), "w") as f:
        f.write(os.path.join(d, "ckpt"))
    write_dump(os.path.join(d, "values"), [("w" + VAR, x)])
    c.equal_bits(tf.train.load_checkpoint(os.path.join(d, "ckpt")).get_tensor("w" + VAR), x, "slices: TF reads them")
    return c.done("tf-writes")


def keras_writes(root):
    import keras as K3
    import tf_keras as K

    c = Checks()
    x, y = batch(0)
    x2, y2 = batch(1)

    def fit(model, opt, K):
        model.compile(optimizer=opt, loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)  # 4 steps

    def save(case, model, opt, values):
        d = os.path.join(root, case)
        os.makedirs(d, exist_ok=True)
        path = tf.train.Checkpoint(model=model, optimizer=opt).write(os.path.join(d, "ckpt"))
        with open(os.path.join(d, "prefix"), "w") as f:
            f.write(path)
        write_dump(os.path.join(d, "values"), values)
        write_dump(os.path.join(d, "io"), [("x", x2), ("y", y2), ("logits", model(x2, training=False).numpy())])
        return d, dict(tf.train.list_variables(path))

    # tf_keras with the legacy Adam: the layout chorus writes (.OPTIMIZER_SLOT, optimizer/iter).
    tf.random.set_seed(1)
    model, opt = seed_cnn(K), K.optimizers.legacy.Adam(1e-3)
    fit(model, opt, K)
    values = legacy_keys(model, opt)
    d, listed = save("k2legacy", model, opt, values)
    hyper = {f"optimizer/{h}{VAR}" for h in ("beta_1", "beta_2", "decay", "learning_rate")}
    c.check(set(listed) == {k for k, _ in values} | hyper | {GRAPH},
            f"k2legacy: keys beyond the expected: {sorted(set(listed) - {k for k, _ in values})}")
    c.check(int(opt.iterations.numpy()) == 4, f"k2legacy: iterations {opt.iterations.numpy()}")
    # One more step on (x2, y2): what chorus must reproduce after restoring.
    model.train_on_batch(x2, y2)
    write_dump(os.path.join(d, "after"), legacy_keys(model, opt))

    # tf_keras with its default Adam (Keras 2.11+): slots under optimizer/_variables/N.
    tf.random.set_seed(2)
    model, opt = seed_cnn(K), K.optimizers.Adam(1e-3)
    fit(model, opt, K)
    values = [(f"model/layer_with_weights-{i // 2}/{('kernel', 'bias')[i % 2]}{VAR}", w.numpy())
              for i, w in enumerate(model.trainable_variables)]
    values += [(f"optimizer/_variables/{i}{VAR}", v.numpy()) for i, v in enumerate(opt.variables) if i > 0]
    values += [("optimizer/_iterations" + VAR, np.array(opt.iterations.numpy(), np.int64)),
               ("optimizer/_learning_rate" + VAR, np.array(opt.learning_rate.numpy(), np.float32))]
    _, listed = save("k2", model, opt, values)
    c.check(set(listed) == {k for k, _ in values} | {GRAPH},
            f"k2: TF's keys vs the expected: {sorted(set(listed) ^ ({k for k, _ in values} | {GRAPH}))[:6]}")
    n = len(model.trainable_variables)
    c.check(all(opt.variables[1 + 2 * i] is opt._momentums[i] and opt.variables[2 + 2 * i] is opt._velocities[i]
                for i in range(n)), "k2: _variables/1+2i and /2+2i are m and v of trainable variable i")

    # Keras 3 (the `keras` package): its own object names.
    K3.utils.set_random_seed(3)
    model, opt = seed_cnn(K3), K3.optimizers.Adam(1e-3)
    fit(model, opt, K3)
    values = [(f"optimizer/_trainable_variables/{i}{VAR}", w.numpy()) for i, w in enumerate(model.trainable_variables)]
    n = len(model.trainable_variables)
    c.check(all(opt.variables[2 + 2 * i] is opt._momentums[i] and opt.variables[3 + 2 * i] is opt._velocities[i]
                for i in range(n)), "k3: _variables/2+2i and /3+2i are m and v of trainable variable i")
    values += [(f"optimizer/_variables/{i}{VAR}", v.numpy()) for i, v in enumerate(opt.variables) if i > 1]
    values += [("optimizer/_iterations" + VAR, np.array(opt.iterations.numpy(), np.int64)),
               ("optimizer/_learning_rate" + VAR, np.array(opt.learning_rate.numpy(), np.float32))]
    _, listed = save("k3", model, opt, values)
    c.check(set(listed) == {k for k, _ in values} | {GRAPH},
            f"k3: TF's keys vs the expected: {sorted(set(listed) ^ ({k for k, _ in values} | {GRAPH}))[:6]}")
    print("keras", K3.__version__, "tf_keras", K.__version__)
    return c.done("keras-writes")


def main(argv):
    global tf
    modes = {"chorus-wrote": (chorus_wrote, 1), "chorus-wrote-sharded": (chorus_wrote_sharded, 1),
             "keras-restores": (keras_restores, 1),
             "keras-restores-lso": (keras_restores_lso, 1), "keras-restores-mixed": (keras_restores_mixed, 1),
             "tf-writes": (tf_writes, 1), "keras-writes": (keras_writes, 1)}
    if len(argv) < 2 or argv[1] not in modes or len(argv) != 2 + modes[argv[1]][1]:
        print(__doc__)
        return 2
    import tensorflow

    tf = tensorflow
    fn, _ = modes[argv[1]]
    return fn(*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
