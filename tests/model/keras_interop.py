"""tf_keras's side of tests/model/keras_interop_test.cc (issue 43: functional and nested models).

Run with the interop Python (tests/core/interop_python.h). Prints one line per check; exits 0 only
when every check passed, 1 otherwise, 2 on bad usage. Arrays travel as "dumps"
(tests/checkpoint/tf_interop.py explains the format; its helpers are reused).

  functional-reads DIR    (chorus wrote) DIR/prefix: tf.train.Checkpoint(model=outer).write of
                          chorus's functional model (graph below); DIR/weights: outer.save_weights;
                          DIR/io: inputs a, b and chorus's outputs out0, out1. tf_keras builds the
                          same graph, restores each with assert_consumed(), and its outputs on a, b
                          equal chorus's.
  attention-json DIR      (both) reads chorus's JSON + weights of a transformer block and compares
                          outputs and to_json; writes its own block to DIR/keras.
  mha-writes DIR          (tf_keras writes) a MultiHeadAttention model with a key padding mask input
                          and use_causal_mask: DIR/weights, DIR/io (x, pad, y).
  mha-axes-writes DIR     (tf_keras writes) MultiHeadAttention(attention_axes=(2,)) on [B, 3, 5, 8] with a
                          mask [B, 3, 5, 5]: DIR/weights, DIR/io (x, mask, y).
  functional-writes DIR   (tf_keras writes) the same graph, with tf_keras's initial weights:
                          DIR/weights (save_weights), DIR/io (a, b and tf_keras's outputs).

  json-reads DIR          (chorus wrote) DIR/model.json and DIR/seq.json: chorus's to_json of
                          tests/model/json_models.h's two models; DIR/weights: the functional
                          one's save_weights; DIR/io: its inputs img, ids and outputs out0, out1.
                          tf_keras builds both models (json_models below): its to_json equals
                          chorus's (parsed); model_from_json(chorus's JSON) + load_weights(...)
                          .assert_consumed() computes chorus's outputs.
  json-writes DIR         (tf_keras writes) DIR/model.json (to_json), DIR/weights (save_weights)
                          and DIR/io (inputs and its outputs) of the functional json model.

The graph (the same layer names and call order on both sides, so Keras's layer order and
checkpoint numbering must agree): inputs x (4) and y (3); a Dense 'shared' called on x and,
later, on a Dense 'to_shared' of the sum; Dense 'dense_y' on y; Add 'add'; a nested functional
model 'inner' (Dense 'inner_hidden' relu, Dense 'inner_out') on the sum; a ResidualBlock layer
'block' that owns two Dense layers as attributes up/down. Outputs: inner's, and block's.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
import numpy as np  # noqa: E402


def build(K):
    class ResidualBlock(K.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.up = K.layers.Dense(8, activation="relu", name="up")
            self.down = K.layers.Dense(5, name="down")

        def call(self, x):
            return x + self.down(self.up(x))

    x = K.Input((4,), name="x")
    y = K.Input((3,), name="y")
    shared = K.layers.Dense(5, name="shared")
    a = shared(x)
    b = K.layers.Dense(5, name="dense_y")(y)
    s = K.layers.Add(name="add")([a, b])
    inner_in = K.Input((5,), name="inner_in")
    h = K.layers.Dense(5, activation="relu", name="inner_hidden")(inner_in)
    inner = K.Model(inner_in, K.layers.Dense(2, name="inner_out")(h), name="inner")
    out0 = inner(s)
    t = shared(K.layers.Dense(4, name="to_shared")(s))
    out1 = ResidualBlock(name="block")(t)
    return K.Model([x, y], [out0, out1], name="outer")


def functional_reads(root):
    import tensorflow as tf
    import tf_keras as K
    from tf_interop import Checks, read_dump

    c = Checks()
    io = read_dump(os.path.join(root, "io"))
    with open(os.path.join(root, "prefix")) as f:
        prefix = f.read().strip()
    m = build(K)
    c.check([l.name for l in m.layers] == ["x", "y", "shared", "dense_y", "add", "to_shared", "inner", "block"],
            f"tf_keras's layer order: {[l.name for l in m.layers]}")
    tf.train.Checkpoint(model=m).read(prefix).assert_consumed()
    c.check(True, "tf.train.Checkpoint(model=outer).read(chorus's checkpoint).assert_consumed()")
    for name, model in (("checkpoint", m), ("save_weights", None)):
        if model is None:
            model = build(K)
            model.load_weights(os.path.join(root, "weights")).assert_consumed()
            c.check(True, "load_weights(chorus's save_weights).assert_consumed()")
        got = model([io["a"], io["b"]])
        for i in range(2):
            err = float(np.max(np.abs(got[i].numpy() - io[f"out{i}"])))
            c.check(err <= 1e-5, f"{name}: output {i} equals chorus's (max |diff| {err:.3g})")
    return c.done("functional-reads")


def functional_writes(root):
    import tf_keras as K
    from tf_interop import Checks, write_dump

    c = Checks()
    m = build(K)
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
    b = rng.uniform(-1, 1, (6, 3)).astype(np.float32)
    out = m([a, b])
    m.save_weights(os.path.join(root, "weights"))
    write_dump(os.path.join(root, "io"), [("a", a), ("b", b), ("out0", out[0].numpy()), ("out1", out[1].numpy())])
    c.check(True, "tf_keras wrote save_weights and its outputs")
    return c.done("functional-writes")


def json_differences(ours, theirs, path=""):
    """Where two parsed JSON documents differ: ["config/layers[3]/config/axis: [2] vs -1", ...]."""
    if type(ours) is not type(theirs):
        return [f"{path}: {json_short(ours)} vs {json_short(theirs)}"]
    if isinstance(ours, dict):
        out = []
        for k in list(ours) + [k for k in theirs if k not in ours]:
            if k not in ours or k not in theirs:
                out.append(f"{path}/{k}: only in {'chorus' if k in ours else 'tf_keras'}'s")
            else:
                out += json_differences(ours[k], theirs[k], f"{path}/{k}")
        return out
    if isinstance(ours, list):
        out = [] if len(ours) == len(theirs) else [f"{path}: {len(ours)} vs {len(theirs)} items"]
        for n, (a, b) in enumerate(zip(ours, theirs)):
            out += json_differences(a, b, f"{path}[{n}]")
        return out
    return [] if ours == theirs else [f"{path}: {json_short(ours)} vs {json_short(theirs)}"]


def json_short(v):
    import json
    return json.dumps(v)[:120]


def json_models(K):
    """tests/model/json_models.h's two_input_model and mixed_sequential, in tf_keras."""
    L, I = K.layers, K.initializers
    img = K.Input((8, 8, 3), name="img")
    ids = K.Input((5,), dtype="int32", name="ids")
    h = L.Conv2D(4, 3, activation="relu", kernel_initializer=I.HeNormal(seed=7), name="conv")(img)
    h = L.MaxPooling2D(2, name="pool")(h)
    h = L.BatchNormalization(momentum=0.9, epsilon=1e-3, name="bn")(h)
    h = L.Flatten(name="flat")(h)
    h = L.Dropout(0.25, seed=3, name="drop")(h)
    h = L.Dense(6, kernel_initializer=I.GlorotUniform(seed=1), name="dense_img")(h)
    e = L.Embedding(10, 4, embeddings_initializer=I.RandomUniform(-0.1, 0.1, seed=2), name="emb")(ids)
    e = L.Flatten(name="flat_ids")(e)
    e = L.Dense(6, activation="tanh", kernel_initializer=I.GlorotUniform(seed=3), bias_initializer=I.Constant(0.5),
                name="dense_ids")(e)
    shared = L.Dense(6, activation="relu", kernel_initializer=I.GlorotUniform(seed=4), name="shared")
    a, b = shared(h), shared(e)
    s = L.Add(name="add")([a, b])
    cat = L.Concatenate(axis=-1, name="cat")([a, b])
    inner_in = K.Input((6,), name="inner_in")
    inner_out = L.Dense(2, activation="sigmoid", kernel_initializer=I.GlorotUniform(seed=5), name="inner_out")(inner_in)
    inner = K.Model(inner_in, inner_out, name="inner")
    outer = K.Model([img, ids], [inner(s), L.Activation("gelu", name="act")(cat)], name="outer")

    K.mixed_precision.set_global_policy("mixed_bfloat16")
    seq = K.Sequential([
        L.Conv1D(4, 3, padding="causal", activation="relu", kernel_initializer=I.GlorotUniform(seed=1), name="c1"),
        L.Reshape((6, 4, 1), name="reshape"),
        L.ZeroPadding2D(((1, 0), (2, 3)), name="pad"),
        L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, depthwise_initializer=I.GlorotUniform(seed=2),
                          name="dw"),
        L.AveragePooling2D(1, strides=1, padding="same", name="avg"),
        L.Permute((2, 1, 3), name="perm"),
        L.GlobalMaxPooling2D(keepdims=True, name="gmax"),
        L.GlobalAveragePooling2D(name="gavg"),
        L.Dense(3, activation="softmax", kernel_initializer=I.GlorotUniform(seed=3), dtype="float32", name="out"),
    ], name="seq")
    K.mixed_precision.set_global_policy("float32")
    seq.build((None, 6, 5))
    return outer, seq


def json_reads(root):
    import json
    import tf_keras as K
    from tf_interop import Checks, read_dump

    c = Checks()
    outer, seq = json_models(K)
    for name, model in (("model.json", outer), ("seq.json", seq)):
        with open(os.path.join(root, name)) as f:
            ours = json.loads(f.read())
        theirs = json.loads(model.to_json())
        same = ours == theirs
        for d in json_differences(ours, theirs)[:20]:
            print(f"{name}: chorus vs tf_keras at {d}")
        c.check(same, f"{name}: chorus's to_json equals tf_keras's to_json of the same model")
    with open(os.path.join(root, "model.json")) as f:
        m = K.models.model_from_json(f.read())
    m.load_weights(os.path.join(root, "weights")).assert_consumed()
    c.check(True, "tf_keras model_from_json(chorus's JSON) + load_weights(chorus's save_weights).assert_consumed()")
    io = read_dump(os.path.join(root, "io"))
    got = m([io["img"], io["ids"]], training=False)
    for i in range(2):
        err = float(np.max(np.abs(got[i].numpy() - io[f"out{i}"])))
        c.check(err <= 1e-5, f"model_from_json output {i} equals chorus's (max |diff| {err:.3g})")
    return c.done("json-reads")


def json_writes(root):
    import tf_keras as K
    from tf_interop import Checks, write_dump

    c = Checks()
    outer, _ = json_models(K)
    rng = np.random.default_rng(6)
    img = rng.uniform(-1, 1, (3, 8, 8, 3)).astype(np.float32)
    ids = rng.integers(0, 10, (3, 5)).astype(np.int32)
    # Moving statistics away from 0 and 1, so that restoring them is visible in the outputs.
    bn = outer.get_layer("bn")
    bn.moving_mean.assign(rng.uniform(-0.5, 0.5, bn.moving_mean.shape).astype(np.float32))
    bn.moving_variance.assign(rng.uniform(0.5, 2, bn.moving_variance.shape).astype(np.float32))
    out = outer([img, ids], training=False)
    with open(os.path.join(root, "model.json"), "w") as f:
        f.write(outer.to_json())
    outer.save_weights(os.path.join(root, "weights"))
    write_dump(os.path.join(root, "io"), [("img", img), ("ids", ids), ("out0", out[0].numpy()),
                                          ("out1", out[1].numpy())])
    c.check(True, "tf_keras wrote to_json, save_weights and its outputs")
    return c.done("json-writes")


def mha_writes(root):
    """tf_keras's MultiHeadAttention (2 heads, key_dim 4, use_causal_mask) with a key padding
    mask, as tests/model/multi_head_attention_test.cc builds it: weights and outputs."""
    import tf_keras as K
    from tf_interop import Checks, write_dump

    c = Checks()
    x = K.Input((6, 8), name="x")
    pad = K.Input((6, 6), dtype="bool", name="pad")  # [B, T, S]: every query's key padding
    y = K.layers.MultiHeadAttention(2, 4, name="mha")(x, x, x, attention_mask=pad, use_causal_mask=True)
    m = K.Model([x, pad], y, name="m")
    rng = np.random.default_rng(3)
    xv = rng.uniform(-1, 1, (3, 6, 8)).astype(np.float32)
    pv = np.ones((3, 6, 6), dtype=bool)
    pv[1, :, 4:] = False
    pv[2, :, 1:] = False
    out = m([xv, pv]).numpy()
    m.save_weights(os.path.join(root, "weights"))
    write_dump(os.path.join(root, "io"), [("x", xv), ("pad", pv.astype(np.uint8)), ("y", out)])
    c.check(True, "tf_keras wrote MultiHeadAttention's weights and outputs")
    return c.done("mha-writes")


def mha_axes_writes(root):
    """tf_keras's MultiHeadAttention(2, 4, attention_axes=(2,)) on [B, 3, 5, 8] with a mask [B, 3, 5, 5],
    as tests/model/multi_head_attention_test.cc builds it: weights and outputs."""
    import tf_keras as K
    from tf_interop import Checks, write_dump

    c = Checks()
    x = K.Input((3, 5, 8), name="x")
    mask = K.Input((3, 5, 5), dtype="bool", name="mask")
    y = K.layers.MultiHeadAttention(2, 4, attention_axes=(2,), name="mha")(x, x, x, attention_mask=mask)
    m = K.Model([x, mask], y, name="m")
    rng = np.random.default_rng(4)
    xv = rng.uniform(-1, 1, (2, 3, 5, 8)).astype(np.float32)
    mv = rng.uniform(0, 1, (2, 3, 5, 5)) > 0.3
    mv[:, :, :, 0] = True  # every query attends to something
    out = m([xv, mv]).numpy()
    m.save_weights(os.path.join(root, "weights"))
    write_dump(os.path.join(root, "io"), [("x", xv), ("mask", mv.astype(np.uint8)), ("y", out)])
    c.check(True, "tf_keras wrote MultiHeadAttention(attention_axes=(2,))'s weights and outputs")
    return c.done("mha-axes-writes")


def attention_json(root):
    """Reads chorus's JSON of a transformer block (LayerNormalization, MultiHeadAttention with
    use_causal_mask, Add, Dense gelu, LayerNormalization over axis 1), restores chorus's weights and compares the outputs; then
    builds the same block itself and writes DIR/keras/{model.json, weights, io}."""
    import json
    import tf_keras as K
    from tf_interop import Checks, read_dump, write_dump

    c = Checks()
    with open(os.path.join(root, "model.json")) as f:
        text = f.read()
    m = K.models.model_from_json(text)
    m.load_weights(os.path.join(root, "weights")).assert_consumed()
    c.check(True, "tf_keras model_from_json(chorus's attention block) + load_weights(...).assert_consumed()")
    io = read_dump(os.path.join(root, "io"))
    err = float(np.max(np.abs(m(io["x"]).numpy() - io["y"])))
    c.check(err <= 1e-5, f"model_from_json's output equals chorus's (max |diff| {err:.3g})")
    x = K.Input((6, 8), name="x")
    h = K.layers.LayerNormalization(epsilon=1e-5, name="ln")(x)
    a = K.layers.MultiHeadAttention(2, 4, name="mha")(h, h, use_causal_mask=True)
    r = K.layers.Add(name="residual")([x, a])
    y = K.layers.Dense(8, activation="gelu", name="mlp")(r)
    z = K.layers.LayerNormalization(axis=1, name="ln_seq")(y)
    k = K.Model(x, z, name="block")
    ours, theirs = json.loads(text), json.loads(k.to_json())
    same = ours == theirs
    for d in json_differences(ours, theirs)[:20]:
        print(f"chorus vs tf_keras at {d}")
    c.check(same, "chorus's to_json equals tf_keras's to_json of the same block")
    out = os.path.join(root, "keras")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.json"), "w") as f:
        f.write(k.to_json())
    ln_seq = k.get_layer("ln_seq")
    ln_seq.gamma.assign(np.linspace(0.5, 2.0, 6).astype(np.float32))
    ln_seq.beta.assign(np.linspace(-0.3, 0.4, 6).astype(np.float32))
    k.save_weights(os.path.join(out, "weights"))
    xv = np.random.default_rng(9).uniform(-1, 1, (3, 6, 8)).astype(np.float32)
    write_dump(os.path.join(out, "io"), [("x", xv), ("y", k(xv).numpy())])
    return c.done("attention-json")


def main(argv):
    import tensorflow as tf
    import tf_interop

    tf_interop.tf = tf  # Checks.done prints TF's version
    modes = {"functional-reads": functional_reads, "functional-writes": functional_writes,
             "json-reads": json_reads, "json-writes": json_writes, "mha-writes": mha_writes, "mha-axes-writes": mha_axes_writes,
             "attention-json": attention_json}
    if len(argv) != 3 or argv[1] not in modes:
        print(f"usage: {argv[0]} {{{'|'.join(modes)}}} DIR", file=sys.stderr)
        return 2
    return modes[argv[1]](argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
