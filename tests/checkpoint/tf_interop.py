"""TensorFlow's side of tests/checkpoint/tensorflow_interop_test.cc.

  tf_interop.py read PREFIX EXPECTED   tf.train.load_checkpoint lists and reads chorus's checkpoint;
                                       every key/value in EXPECTED (lines "key dtype v1 v2 ...") must
                                       match; then TF's object-based restore (tf.train.Checkpoint)
                                       into tf.Variables / tf.Module must consume it.
  tf_interop.py write PREFIX           writes a TF checkpoint for chorus to restore.
  tf_interop.py keras PREFIX EXPECTED  a Keras 2 (tf_keras) Sequential Dense(3) -> Dropout -> Dense(2)
                                       on inputs of 4 restores chorus's {"model": Sequential} checkpoint
                                       (layer_with_weights-N keys); its weights must equal EXPECTED
                                       (lines "name v1 v2 ..." for kernel0 bias0 kernel1 bias1).
                                       Exit 77 when tf_keras is not installed.
Exit 0 on success; prints what differs otherwise.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def read(prefix, expected_path):
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    ok = True
    with open(expected_path) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            key, dtype, values = parts[0], parts[1], parts[2:]
            if key not in shapes:
                print(f"missing key {key}; TF lists {sorted(shapes)}")
                ok = False
                continue
            got = reader.get_tensor(key)
            want = np.array([float(v) for v in values], dtype=np.float64)
            if str(got.dtype) != dtype or not np.array_equal(got.reshape(-1).astype(np.float64), want):
                print(f"{key}: TF read {got.dtype} {got.reshape(-1)[:8]}, expected {dtype} {want[:8]}")
                ok = False
    # Object-based restore: the same structure built from TF objects.
    net = tf.Module()
    net.w = tf.Variable(tf.zeros([2], tf.float32))
    ckpt = tf.train.Checkpoint(v=tf.Variable(tf.zeros([2, 3], tf.float32)),
                               step=tf.Variable(tf.constant(0, tf.int64)), net=net)
    ckpt.restore(prefix).assert_consumed()
    if not np.array_equal(net.w.numpy(), np.array([5, 6], np.float32)):
        print("object-based restore: net.w =", net.w.numpy())
        ok = False
    if int(ckpt.step.numpy()) != 42:
        print("object-based restore: step =", ckpt.step.numpy())
        ok = False
    print("TF", tf.__version__, "read", len(shapes), "keys:", "ok" if ok else "MISMATCH")
    return 0 if ok else 1


def keras(prefix, expected_path):
    try:
        import tf_keras
    except ImportError:
        print("tf_keras is not installed")
        return 77
    m = tf_keras.Sequential([tf_keras.layers.Dense(3, input_shape=(4,)), tf_keras.layers.Dropout(0.1),
                             tf_keras.layers.Dense(2)])
    tf.train.Checkpoint(model=m).read(prefix).assert_existing_objects_matched()
    got = [w.reshape(-1) for w in m.get_weights()]  # kernel0, bias0, kernel1, bias1
    ok = True
    with open(expected_path) as f:
        want = [np.array([float(v) for v in line.split()[1:]], np.float32) for line in f if line.strip()]
    for i, (g, w) in enumerate(zip(got, want)):
        if not np.array_equal(g, w):
            print(f"weight {i}: keras {g[:6]}, chorus {w[:6]}")
            ok = False
    print("tf_keras", tf_keras.__version__, "restored the Sequential:", "ok" if ok else "MISMATCH")
    return 0 if ok and len(got) == len(want) == 4 else 1


def write(prefix):
    net = tf.Module()
    net.w = tf.Variable([1.5, -2.5], dtype=tf.float32)
    ckpt = tf.train.Checkpoint(v=tf.Variable(np.arange(6, dtype=np.float64).reshape(2, 3)),
                               step=tf.Variable(tf.constant(7, tf.int64)),
                               ids=tf.Variable(tf.constant([3, 1, 2], tf.int32)), net=net)
    path = ckpt.write(prefix)
    print("TF", tf.__version__, "wrote", path)
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "read":
        sys.exit(read(sys.argv[2], sys.argv[3]))
    if len(sys.argv) >= 4 and sys.argv[1] == "keras":
        sys.exit(keras(sys.argv[2], sys.argv[3]))
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        sys.exit(write(sys.argv[2]))
    print(__doc__)
    sys.exit(2)
