"""tf_keras's side of tests/model/resnet_parity_test.cc (issue 43 item 5): examples/resnet.h's
ResNet trained by tf_keras from chorus's initial weights on chorus's batches, against chorus.

  resnet_parity.py DIR

DIR (chorus wrote it): config.json (widths, blocks_per_stage, classes, BN momentum and epsilon,
SGD learning_rate and momentum, batch, steps, snapshot_step); init (chorus's save_weights of the
untrained model); batches (a dump: x [steps·batch, 28, 28, 1], y); and for each chorus run R in
one_device, mirrored, mirrored_sync: R/losses (a dump: the loss of each step), R/snapshot and
R/final (save_weights after snapshot_step steps and after the last).

tf_keras builds the same graph (the same layer names, in the same call order, so Keras's layer
order and checkpoint numbering agree), load_weights(DIR/init).assert_consumed(), compiles SGD with
momentum (tf_keras.optimizers.SGD: v <- momentum·v - lr·g, w <- w + v, as chorus's) and
SparseCategoricalCrossentropy(from_logits=True), and takes one train_on_batch per batch, twice:
on one device (the default strategy on /cpu:0) and under MirroredStrategy on 2 logical CPU
devices (each replica normalizes with its half of the batch; rows [16r, 16r + 16) go to replica r,
as in chorus). Its BatchNormalization is fused=False: tf_keras's fused kernel moves
moving_variance toward the batch variance with Bessel's correction (n/(n-1)), chorus, Keras 3 and
tf_keras's non-fused path toward the biased one — the only difference between the two (the
losses do not depend on it; the moving variances would differ by up to 6e-3 of their update).
Checks:
  one_device    vs tf_keras on one device
  mirrored      vs tf_keras's MirroredStrategy  (per-replica BatchNormalization on both sides)
  mirrored_sync vs tf_keras on one device       (synchronized BN = the global batch's statistics)
  each: the loss of every step within loss_tol(step); every weight (kernels, biases, gamma, beta,
  moving mean and variance) after snapshot_step steps and after the last step within
  SNAPSHOT_RTOL / FINAL_RTOL of its update, |w_chorus - w_tf| / |w_tf - w_init|. And the control:
  chorus's mirrored run (per-replica statistics) differs from one-device tf_keras by more than 10
  tolerances at some step, so the tolerances tell the two BN semantics apart.

Why these tolerances ("float32 noise"): both sides compute in float32 with other kernels (oneDNN vs
Eigen convolutions, other summation orders), so the first losses differ by an ulp or so (2.4e-7 at
a loss of 2.7); training then amplifies such differences about twofold per step — a property of
this network, not of chorus: tf_keras against itself, its initial weights perturbed by 1e-7
(relative), differs by 1e-6 after 5 steps and 1e-4..4e-4 after 20, under SGD with or without
momentum and under Adam; chorus against itself (one_device vs mirrored_sync: the same math summed
in another order) differs by 2e-6 at step 1, 5e-5 at step 6 and 7e-4 at step 14 (printed below
as the noise floor). Hence loss_tol(k) = min(LOSS_TOL_CAP, LOSS_TOL_0·2^k)·max(1, loss): 40 ulps
at step 0, about 25x the measured floor at every step, capped at 5e-3 (7x the floor's largest).
Mistakes move the losses far more (measured by changing tf_keras's side): a BN epsilon of 1e-5 for
1e-3 changes step 0 by 4e-4 (15 tolerances), SGD without its momentum term step 2 by 1.6e-2 (150),
half the learning rate (gradients averaged instead of summed over 2 replicas) step 1 by 8e-3 (150),
per-replica instead of global statistics step 0 by 7e-3 (the control). Weights are noisier than
losses where an update is a sum that cancels (BN's d gamma = sum(dy·x_hat) over 25,088 values has
a relative rounding error of ~1e-4 in chorus and TF alike): chorus against itself differs by 4e-3
of gamma's update after 3 steps, by 6e-2 of beta's after 20; SNAPSHOT_RTOL = 2e-2 and
FINAL_RTOL = 0.3 are 5x those, and a wrong BN momentum (0.99 for 0.9) puts the moving statistics
off by several times their update (checked like the losses above).
Exits 0 only when every check passed, 1 otherwise, 2 on bad usage.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
import numpy as np  # noqa: E402

LOSS_TOL_0, LOSS_TOL_CAP = 1e-5, 5e-3
SNAPSHOT_RTOL, FINAL_RTOL = 2e-2, 0.3


def build(K, cfg):
    """examples/resnet.h's build_resnet, layer for layer."""
    L = K.layers

    def conv(filters, kernel, strides, name):
        return L.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False,
                        kernel_initializer="he_normal", name=name)

    def bn(name):
        # fused=False: tf_keras's fused kernel (its default for 4-D inputs) moves moving_variance
        # toward the batch variance with Bessel's correction, n/(n-1) times chorus's (and Keras 3's,
        # and tf_keras's own non-fused path's) biased one; the normalization itself is the same.
        return L.BatchNormalization(momentum=cfg["bn_momentum"], epsilon=cfg["bn_epsilon"], fused=False, name=name)

    image = K.Input((28, 28, 1), name="image")
    x = conv(cfg["widths"][0], 3, 1, "stem_conv")(image)
    x = L.Activation("relu", name="stem_relu")(bn("stem_bn")(x))
    channels = cfg["widths"][0]
    for s, width in enumerate(cfg["widths"]):
        for b in range(cfg["blocks_per_stage"]):
            p = f"s{s + 1}b{b + 1}_"
            stride = 2 if s > 0 and b == 0 else 1
            h = conv(width, 3, stride, p + "conv1")(x)
            h = L.Activation("relu", name=p + "relu1")(bn(p + "bn1")(h))
            h = bn(p + "bn2")(conv(width, 3, 1, p + "conv2")(h))
            shortcut = x
            if stride != 1 or width != channels:
                shortcut = bn(p + "proj_bn")(conv(width, 1, stride, p + "proj")(x))
            x = L.Activation("relu", name=p + "out")(L.Add(name=p + "add")([h, shortcut]))
            channels = width
    x = L.GlobalAveragePooling2D(name="pool")(x)
    return K.Model(image, L.Dense(cfg["classes"], name="logits")(x), name="resnet")


def loss_tol(step, loss):
    """float32 noise after `step` steps (see the module's docstring)."""
    return min(LOSS_TOL_CAP, LOSS_TOL_0 * 2.0 ** step) * max(1.0, loss)


def train(K, cfg, root, strategy, x, y):
    """tf_keras's run: losses per step; weights (by name) at the start, after snapshot_step steps, at the end."""
    with strategy.scope():
        model = build(K, cfg)
        model.load_weights(os.path.join(root, "init")).assert_consumed()
        model.compile(optimizer=K.optimizers.SGD(learning_rate=cfg["learning_rate"], momentum=cfg["momentum"]),
                      loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    n, losses, weights = cfg["batch"], [], {"init": weights_by_name(model)}
    for i in range(cfg["steps"]):
        losses.append(float(model.train_on_batch(x[i * n:(i + 1) * n], y[i * n:(i + 1) * n])))
        if i + 1 == cfg["snapshot_step"]:
            weights["snapshot"] = weights_by_name(model)
    weights["final"] = weights_by_name(model)
    return np.array(losses), weights


def weights_by_name(model):
    # get_weights reads ON_READ variables (the moving statistics) as their mean over replicas.
    return {w.name: v for w, v in zip(model.weights, model.get_weights())}


def chorus_weights(K, cfg, root, run, which):
    """chorus's save_weights DIR/run/which, read by tf_keras into the same graph."""
    model = build(K, cfg)
    model.load_weights(os.path.join(root, run, which)).assert_existing_objects_matched().expect_partial()
    return weights_by_name(model)


def compare_losses(c, got, want, what):
    diff = np.abs(got - want)
    tol = np.array([loss_tol(k, w) for k, w in enumerate(want)])
    worst = int(np.argmax(diff / tol))
    print(f"{what}: |loss diff| per step: {' '.join(f'{d:.1e}' for d in diff)}", flush=True)
    return c.check(bool(np.all(diff <= tol)),
                   f"{what}: every step's loss within min({LOSS_TOL_CAP:g}, {LOSS_TOL_0:g}·2^step)·max(1, loss); "
                   f"closest to it: step {worst}, |diff| {diff[worst]:.3g} (tolerance {tol[worst]:.3g}); loss "
                   f"{want[0]:.4f} -> {want[-1]:.4f}")


def update_distance(have, want, init):
    """|have - want| / |want - init| (Euclidean norms): the part of the update that disagrees."""
    return float(np.linalg.norm(have - want)) / max(1e-12, float(np.linalg.norm(want - init)))


def compare_weights(c, have, want, init, rtol, what):
    """Each weight's distance from tf_keras's, as a fraction of how far tf_keras moved it from init."""
    c.check(set(want) == set(have), f"{what}: the same weights ({sorted(set(want) ^ set(have))[:4]})")
    worst, worst_name, bad = 0.0, "", []
    for name in sorted(set(want) & set(have)):
        rel = update_distance(have[name], want[name], init[name])
        if rel > worst:
            worst, worst_name = rel, name
        if rel > rtol:
            bad.append(f"{name} ({rel:.3g})")
    return c.check(not bad, f"{what}: {len(want)} weights within {rtol:g} of their update (|w_chorus - w_tf| / "
                            f"|w_tf - w_init|); worst {worst_name} {worst:.3g}; beyond: {bad[:4]}")


def compare(c, K, cfg, root, run, tf_losses, tf_weights, yardstick):
    import tf_interop

    got = tf_interop.read_dump(os.path.join(root, run, "losses"))["losses"].astype(np.float64)
    compare_losses(c, got, tf_losses, f"{run} vs {yardstick}")
    for which, rtol in (("snapshot", SNAPSHOT_RTOL), ("final", FINAL_RTOL)):
        step = cfg["snapshot_step"] if which == "snapshot" else cfg["steps"]
        compare_weights(c, chorus_weights(K, cfg, root, run, which), tf_weights[which], tf_weights["init"], rtol,
                        f"{run} vs {yardstick}, after {step} steps")
    return got


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} DIR", file=sys.stderr)
        return 2
    root = argv[1]
    import tensorflow as tf
    import tf_interop

    tf_interop.tf = tf  # Checks.done prints TF's version
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import tf_keras as K

    with open(os.path.join(root, "config.json")) as f:
        cfg = json.load(f)
    batches = tf_interop.read_dump(os.path.join(root, "batches"))
    x, y = batches["x"], batches["y"]
    c = tf_interop.Checks()

    one_losses, one_weights = train(K, cfg, root, tf.distribute.get_strategy(), x, y)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    c.check(mirrored.num_replicas_in_sync == 2, "tf_keras's MirroredStrategy has 2 replicas")
    mir_losses, mir_weights = train(K, cfg, root, mirrored, x, y)
    c.check(one_losses[-1] < 0.85 * one_losses[0], f"tf_keras trains: loss {one_losses[0]:.4f} -> {one_losses[-1]:.4f}")

    one = compare(c, K, cfg, root, "one_device", one_losses, one_weights, "tf_keras on one device")
    got = compare(c, K, cfg, root, "mirrored", mir_losses, mir_weights, "tf_keras MirroredStrategy (2 CPUs)")
    synced = compare(c, K, cfg, root, "mirrored_sync", one_losses, one_weights, "tf_keras on one device")
    # The noise floor, for the record: chorus against itself, the same math summed in another order.
    print("chorus mirrored_sync vs chorus one_device: |loss diff| per step: "
          + " ".join(f"{d:.1e}" for d in np.abs(synced - one)), flush=True)
    for which in ("snapshot", "final"):
        a, b = chorus_weights(K, cfg, root, "one_device", which), chorus_weights(K, cfg, root, "mirrored_sync", which)
        rel = {n: update_distance(a[n], b[n], one_weights["init"][n]) for n in a}
        name = max(rel, key=rel.get)
        print(f"chorus mirrored_sync vs chorus one_device, {which} weights: worst {name} {rel[name]:.3g}", flush=True)
    ratio = np.abs(got - one_losses) / np.array([loss_tol(k, w) for k, w in enumerate(one_losses)])
    c.check(float(ratio.max()) > 10, f"control: per-replica BN (chorus mirrored) vs one device differs by "
                                     f"{ratio.max():.3g} tolerances (> 10) at step {int(ratio.argmax())}")
    return c.done("resnet-parity")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
