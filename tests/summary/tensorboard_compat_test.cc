// Optional: TensorBoard's own Python reader (plugin_event_accumulator.EventAccumulator, the path
// TensorBoard takes without its Rust data server) loads a file written by SummaryWriter. Skips
// with the reason when python3 cannot import tensorboard (the usual case on CI: it is not a
// dependency of chorus and is never installed by the build).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "summary/summary_writer.h"
#include "tests/summary/summary_test_util.h"

namespace chorus::summary {
namespace {

using testing::TempDir;
using testing::write_file;

constexpr const char* kCheck = R"(import sys
import numpy as np
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.util import tensor_util
ea = pea.EventAccumulator(sys.argv[1], size_guidance={'tensors': 0})
ea.Reload()
tags = ea.Tags()['tensors']
for t in ('loss', 'weights', 'inputs', 'notes'):
    assert t in tags, (t, tags)
assert set(ea.PluginTagToContent('scalars')) == {'loss'}
assert set(ea.PluginTagToContent('histograms')) == {'weights'}
assert set(ea.PluginTagToContent('images')) == {'inputs'}
assert set(ea.PluginTagToContent('text')) == {'notes'}
loss = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in ea.Tensors('loss')]
assert loss == [(1, 0.5), (2, 0.25)], loss
h = tensor_util.make_ndarray(ea.Tensors('weights')[0].tensor_proto)
assert h.shape == (2, 3) and h[:, 2].tolist() == [2.0, 2.0], h
im = tensor_util.make_ndarray(ea.Tensors('inputs')[0].tensor_proto)
assert im[0] == b'3' and im[1] == b'2' and im[2][:8] == b'\x89PNG\r\n\x1a\n', im[:2]
try:
    from PIL import Image
    import io
    px = np.asarray(Image.open(io.BytesIO(im[2])))
    assert px.shape == (2, 3) and px.reshape(-1).tolist() == list(range(0, 60, 10)), px
except ImportError:
    pass
txt = tensor_util.make_ndarray(ea.Tensors('notes')[0].tensor_proto)
assert txt.item() == b'hello', txt
print('tensorboard read the file')
)";

TEST(TensorBoardCompat, EventAccumulatorReadsOurFile) {
  if (std::system("python3 -c 'import tensorboard' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 cannot import tensorboard (not installed here; chorus does not depend on it)";
  TempDir dir;
  {
    SummaryWriter writer(dir.str("run"));
    writer.scalar("loss", 0.5, 1);
    writer.scalar("loss", 0.25, 2);
    writer.histogram("weights", std::vector<double>{0, 1, 2, 3}, 1, 2);
    std::vector<std::uint8_t> px;
    for (int i = 0; i < 6; ++i) px.push_back(static_cast<std::uint8_t>(10 * i));
    writer.image("inputs", Tensor::from_vector(px, Shape{1, 2, 3, 1}), 1);
    writer.text("notes", "hello", 1);
  }
  write_file(dir.str("check.py"), kCheck);
  const std::string cmd = "python3 " + dir.str("check.py") + " " + dir.str("run");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace chorus::summary
