"""TensorBoard's side of tests/summary/tensorboard_compat_test.cc.

  tensorboard_check.py RUN_DIR EXPECTED_DIR [--no-tf]

Loads RUN_DIR with TensorBoard's own EventAccumulator (tensorboard.backend.event_processing.
plugin_event_accumulator, the loader TensorBoard's Python data path uses) and checks that it sees
every value chorus's SummaryWriter wrote, at its step: EXPECTED_DIR/expected.tsv lists them, one
per line, "kind<TAB>tag<TAB>step<TAB>arg<TAB>dtype<TAB>d0,d1,...<TAB>file" with the raw input
chorus was given in EXPECTED_DIR/file:
  scalar     the file holds the float64 chorus was given (TensorBoard holds it as float32)
  histogram  arg = the bucket count; the file holds the float64 data; the buckets must equal
             TensorBoard's own histogram_pb(tag, data, buckets) (summary_v2, what tf.summary writes)
  image      arg = max_outputs; the file holds the [k, h, w, c] images (uint8, or float32 in [0, 1]
             converted as tf.image.convert_image_dtype(saturate=True)); the PNGs must decode (PIL) to
             the first min(k, max_outputs) of them
  text       arg unused; the file holds the UTF-8 text
Also: each tag carries its plugin's metadata, and no tag or step appears that was not written.

--no-tf makes TensorBoard use its TensorFlow stub (tensorboard.compat.notf), as in an install of
tensorboard without TensorFlow: then its own record reader with CRC checks reads the file.
Prints one line per failure; exits 0 when every check passed, 1 otherwise.
"""
import io
import os
import sys
import types

if "--no-tf" in sys.argv:
    sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")
    sys.argv.remove("--no-tf")
    WANT_READER = "tensorboard.compat.tensorflow_stub"
else:
    WANT_READER = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_accumulator as pea  # noqa: E402
from tensorboard.compat import tf as tb_tf  # noqa: E402
from tensorboard.plugins.histogram import summary_v2 as histogram_v2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return ok


def load(path, dtype, dims):
    shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.dtype(dtype)).reshape(shape)


def main(run_dir, expected_dir):
    expected = {}  # (kind, tag) -> {step: (arg, array)}
    with open(os.path.join(expected_dir, "expected.tsv")) as f:
        for line in f:
            if not line.strip():
                continue
            kind, tag, step, arg, dtype, dims, name = line.rstrip("\n").split("\t")
            value = load(os.path.join(expected_dir, name), dtype, dims)
            expected.setdefault((kind, tag), {})[int(step)] = (arg, value)

    ea = pea.EventAccumulator(run_dir, size_guidance={"tensors": 0})  # 0: keep every event
    ea.Reload()
    check(tb_tf.__name__ == WANT_READER, f"TensorBoard reads with {tb_tf.__name__}, expected {WANT_READER}")
    plugin_of = {"scalar": "scalars", "histogram": "histograms", "image": "images", "text": "text"}
    tags = set(ea.Tags()["tensors"])
    check(tags == {tag for _, tag in expected}, f"tags {sorted(tags)} vs written {sorted(t for _, t in expected)}")
    for kind, plugin in plugin_of.items():
        want = {tag for k, tag in expected if k == kind}
        got = set(ea.PluginTagToContent(plugin)) if want else set()
        check(got == want, f"plugin {plugin}: tags {sorted(got)}, expected {sorted(want)}")

    for (kind, tag), by_step in sorted(expected.items()):
        if tag not in tags:
            continue
        events = ea.Tensors(tag)
        steps = [e.step for e in events]
        check(steps == sorted(by_step), f"{tag}: steps {steps}, expected {sorted(by_step)}")
        for e in events:
            if e.step not in by_step:
                continue
            arg, raw = by_step[e.step]
            got = tensor_util.make_ndarray(e.tensor_proto)
            where = f"{kind} {tag} step {e.step}"
            if kind == "scalar":
                want = np.float32(raw)
                check(got.shape == () and got.dtype == np.float32 and got == want, f"{where}: {got!r} vs {want!r}")
            elif kind == "histogram":
                want = tensor_util.make_ndarray(histogram_v2.histogram_pb(tag, raw, buckets=int(arg)).value[0].tensor)
                ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-12, atol=0)
                check(ok and got[:, 2].sum() == raw.size,
                      f"{where}: buckets {got.shape} {got[:3].tolist()} vs TensorBoard's {want.shape} {want[:3].tolist()}")
            elif kind == "image":
                k, h, w, c = raw.shape
                n = min(k, int(arg))
                if not check(got.shape == (2 + n,) and got[0] == str(w).encode() and got[1] == str(h).encode(),
                             f"{where}: header {got[:2].tolist()} (shape {got.shape}) vs width {w} height {h}, {n} images"):
                    continue
                pixels = raw if raw.dtype == np.uint8 else np.trunc(np.clip(raw * 255.5, 0, 255)).astype(np.uint8)
                for i in range(n):
                    png = Image.open(io.BytesIO(got[2 + i]))
                    check(png.format == "PNG", f"{where}: image {i} is {png.format}")
                    px = np.asarray(png).reshape(h, w, c)
                    check(np.array_equal(px, pixels[i]), f"{where}: image {i} pixels differ")
            elif kind == "text":
                check(got.shape == () and got.item() == raw.tobytes(), f"{where}: {got!r} vs {raw.tobytes()!r}")
        check(ea.SummaryMetadata(tag).plugin_data.plugin_name == plugin_of[kind],
              f"{tag}: metadata plugin {ea.SummaryMetadata(tag).plugin_data.plugin_name!r}")
    print(f"tensorboard ({tb_tf.__name__} reader): {checks} checks, {len(failures)} failed", flush=True)
    return 0 if not failures and checks > 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
