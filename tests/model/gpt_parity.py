"""tf_keras's side of tests/model/gpt_parity_test.cc (issue 43): the GPT of examples/gpt_model.h
built in tf_keras 2.21, trained from chorus's initial weights on chorus's batches.

Run with the interop Python (tests/core/interop_python.h). Prints one line per check; exits 0
only when every check passed, 1 otherwise, 2 on bad usage. Arrays travel as "dumps"
(tests/checkpoint/tf_interop.py explains the format; its helpers are reused).

  train DIR --seq T --layers L --d-model D --heads H --steps S --warmup W --decay-steps N
            --alpha A --target LR --weight-decay WD --clipnorm C [--sparse-embedding-gradients]
      DIR/init: chorus's save_weights of the untrained model (before compile);
      DIR/layers.txt: chorus's layer names, one a line (model.layers' order);
      DIR/batches: a dump of x and y, int32 [S, B, T] — the S batches chorus trained on.
      tf_keras builds the same GPT (same layer names and call order: same layer order, same
      checkpoint keys), checks that its layer order equals chorus's, restores DIR/init with
      load_weights(...).assert_consumed(), compiles AdamW(CosineDecay(0, N, A, warmup_target=LR,
      warmup_steps=W), weight_decay=WD, global_clipnorm=C) with
      SparseCategoricalCrossentropy(from_logits=True) under the float32 policy, and writes the
      loss of each of S train_on_batch calls to DIR/keras_losses.txt (one "%.9g" a line).

The model: tokens (int32 [B, T]) → TokenAndPositionEmbedding "embedding" (attributes token_emb
"token" and pos_emb "position", two Embedding layers; positions tf.range(T)) → L blocks of
LayerNormalization "block<b>_norm1" → MultiHeadAttention "block<b>_attention" (H heads, key_dim
D / H, called (a, a, use_causal_mask=True)) → Add "block<b>_add1" → LayerNormalization
"block<b>_norm2" → Dense "block<b>_mlp_up" (4D, gelu) → Dense "block<b>_mlp_down" (D) → Add
"block<b>_add2"; LayerNormalization "final_norm"; Dense "logits" (256, float32). No dropout.

Dense embedding gradients. tf_keras differentiates Embedding into a tf.IndexedSlices with one row
per token of the batch, repeated tokens included, and its optimizer clips before it sums the
repeats (Optimizer.apply_gradients: _clip_gradients, then _deduplicate_sparse_grad). For
global_clipnorm, tf.linalg.global_norm takes the IndexedSlices' values as they are, so a token
seen k times adds the squares of its k row gradients instead of the square of their sum: the norm
is not the gradient's norm, and a clipped step is scaled differently from chorus's (which, like
Keras 3 and PyTorch's clip_grad_norm_, clips the summed, dense gradient). Unless
--sparse-embedding-gradients, this script's model therefore overrides train_step to turn
IndexedSlices into dense tensors before apply_gradients — the same mathematics as tf_keras's own
step otherwise (tape, compiled loss, optimizer.apply_gradients), and the one configuration in
which both compute the same update. AdamW's update itself is the same formula on both sides
(decoupled weight decay w -= w·wd·lr first, then m, v and w -= lr·√(1−β₂ᵗ)/(1−β₁ᵗ)·m/(√v+ε)).
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import numpy as np  # noqa: E402


def build(K, tf, a, dense_gradients):
    from gpt_model import build_gpt  # examples/gpt_model.py

    class DenseGradientModel(K.Model):
        """tf_keras's Model.train_step with IndexedSlices made dense before the optimizer."""

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x, y, y_pred)
            grads = tape.gradient(loss, self.trainable_variables)
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return self.compute_metrics(x, y, y_pred, None)

    return build_gpt(K, tf, a.seq, a.layers, a.d_model, a.heads, DenseGradientModel if dense_gradients else None)


def train(a):
    import tensorflow as tf
    import tf_keras as K
    from tf_interop import Checks, read_dump

    c = Checks()
    K.mixed_precision.set_global_policy("float32")
    model = build(K, tf, a, not a.sparse_embedding_gradients)
    with open(os.path.join(a.dir, "layers.txt")) as f:
        chorus_layers = [line.strip() for line in f if line.strip()]
    names = [layer.name for layer in model.layers]
    if not c.check(names == chorus_layers, f"tf_keras's layer order {names} equals chorus's {chorus_layers}"):
        return c.done("train")
    model.load_weights(os.path.join(a.dir, "init")).assert_consumed()
    c.check(True, "load_weights(chorus's save_weights).assert_consumed()")
    schedule = K.optimizers.schedules.CosineDecay(0.0, a.decay_steps, alpha=a.alpha, warmup_target=a.target,
                                                  warmup_steps=a.warmup)
    model.compile(optimizer=K.optimizers.AdamW(learning_rate=schedule, weight_decay=a.weight_decay,
                                               global_clipnorm=a.clipnorm),
                  loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    batches = read_dump(os.path.join(a.dir, "batches"))
    x, y = batches["x"], batches["y"]
    c.check(x.shape[0] == a.steps and x.shape[2] == a.seq, f"batches of shape {x.shape} for {a.steps} steps")
    losses = [float(model.train_on_batch(x[s], y[s])) for s in range(a.steps)]
    c.check(all(np.isfinite(losses)), f"finite losses {losses}")
    with open(os.path.join(a.dir, "keras_losses.txt"), "w") as f:
        f.writelines(f"{v:.9g}\n" for v in losses)
    print(f"tf_keras losses: {' '.join(f'{v:.6f}' for v in losses)}")
    return c.done("train")


def main(argv):
    import tensorflow as tf
    import tf_interop

    tf_interop.tf = tf  # Checks.done prints TF's version
    p = argparse.ArgumentParser(prog=argv[0])
    p.add_argument("mode", choices=["train"])
    p.add_argument("dir")
    for flag in ("seq", "layers", "d-model", "heads", "steps", "warmup", "decay-steps"):
        p.add_argument("--" + flag, type=int, required=True)
    for flag in ("alpha", "target", "weight-decay", "clipnorm"):
        p.add_argument("--" + flag, type=float, required=True)
    p.add_argument("--sparse-embedding-gradients", action="store_true")
    a = p.parse_args(argv[1:])
    return train(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
