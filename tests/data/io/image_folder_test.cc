// image_dataset_from_directory (data/io/image_folder.cc) element by element against Keras 3.15's
// (tf.keras of TF 2.21) on a folder TensorFlow writes: PNGs and JPEGs of several sizes and channel
// counts in three class folders. Labels and file order exact; images within a stated tolerance
// (1e-3 absolute: the resize is float32 arithmetic in TF's order, and PNG and JPEG pixels decode
// as TF's do, so the values agree up to the rounding of another ISA's float code; on the
// development machine every value was equal);
// with shuffle and a seed, each subset's file list is Keras's. Also: the label modes' dtypes and
// shapes, unbatched elements, the iterator resuming from a checkpoint, and the docs example.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

#include "tests/core/interop_python.h"
#include "tests/data/data_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/image_folder.h>
#include <chorus/data/io/png.h>

namespace chorus::data {
namespace {

using testing::TempDir;

// Writes `root`/<cls>/<name>.png: an h×w×c image whose value at (y, x, k) is (y*7 + x*3 + k*50 + seed) % 256.
void write_png(const std::string& path, std::int64_t h, std::int64_t w, int c, int seed) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(h * w * c));
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        px[static_cast<std::size_t>((y * w + x) * c + k)] =
            static_cast<std::uint8_t>((y * 7 + x * 3 + k * 50 + seed) % 256);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  testing::spit(path, encode_png(px.data(), h, w, c));
}

TEST(ImageFolder, DocsExample) {
  TempDir dir;
  for (int i = 0; i < 6; ++i) write_png(dir / ("photos/cats/c" + std::to_string(i) + ".png"), 30 + i, 40, 3, i);
  for (int i = 0; i < 4; ++i) write_png(dir / ("photos/dogs/d" + std::to_string(i) + ".png"), 50, 20 + i, 3, 9 + i);
  const std::string photos = dir / "photos";
  // --- docs/data.md, "Image folders" (the directory "photos" is dir/photos here) ---
  auto [train, val] = data::image_dataset_from_directory_both(
      photos, {.batch_size = 32, .image_size = {180, 180}, .seed = 123, .validation_split = 0.2, .subset = "both"});
  std::cout << train.class_names.size() << " classes, " << train.file_paths.size() << " training files\n";
  std::int64_t rows = 0;
  for (auto it = train.dataset.make_iterator(); auto batch = it.next();) {
    const chorus::Tensor& images = (*batch)[0];  // float32 [32, 180, 180, 3], values 0..255
    const chorus::Tensor& labels = (*batch)[1];  // int32 [32]
    EXPECT_EQ(images.dtype(), DType::kFloat32);
    EXPECT_EQ(images.shape(), (Shape{8, 180, 180, 3}));
    EXPECT_EQ(labels.dtype(), DType::kInt32);
    rows += labels.shape().dims()[0];
  }
  // --- end of the example ---
  EXPECT_EQ(train.class_names, (std::vector<std::string>{"cats", "dogs"}));
  EXPECT_EQ(rows, 8);
  EXPECT_EQ(val.file_paths.size(), 2u);
}

TEST(ImageFolder, LabelModesDTypesAndShapes) {
  TempDir dir;
  for (int i = 0; i < 5; ++i) write_png(dir / ("a/" + std::to_string(i) + ".png"), 6, 8, 3, i);
  for (int i = 0; i < 3; ++i) write_png(dir / ("b/" + std::to_string(i) + ".png"), 9, 5, 1, i);
  auto first = [&](ImageFolderOptions o) {
    o.verbose = false;
    o.shuffle = false;
    o.image_size = {4, 6};
    return *image_dataset_from_directory(dir.path(), o).dataset.make_iterator().next();
  };
  auto e = first({.batch_size = 8});
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].shape(), (Shape{8, 4, 6, 3}));
  EXPECT_EQ(e[1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 0, 0, 0, 0, 1, 1, 1}));
  e = first({.label_mode = "categorical", .batch_size = 8});
  EXPECT_EQ(e[1].shape(), (Shape{8, 2}));
  EXPECT_EQ(e[1].to_vector<float>()[11], 1.0f);  // row 5 (class b): [0, 1]
  e = first({.label_mode = "binary", .batch_size = 8});
  EXPECT_EQ(e[1].shape(), (Shape{8, 1}));
  EXPECT_EQ(e[1].to_vector<float>(), (std::vector<float>{0, 0, 0, 0, 0, 1, 1, 1}));
  e = first({.label_mode = "none", .batch_size = 8});
  ASSERT_EQ(e.size(), 1u);
  e = first({.color_mode = "grayscale", .batch_size = std::nullopt});
  EXPECT_EQ(e[0].shape(), (Shape{4, 6, 1}));
  EXPECT_EQ(e[1].shape(), Shape{});
  e = first({.color_mode = "rgba", .batch_size = 2, .interpolation = "nearest"});
  EXPECT_EQ(e[0].dtype(), DType::kUInt8);  // as tf.image.resize's nearest
  EXPECT_EQ(e[0].shape(), (Shape{2, 4, 6, 4}));
  EXPECT_EQ(image_dataset_from_directory(dir.path(), {.batch_size = 3, .verbose = false}).dataset.cardinality(), 3);
  EXPECT_THROW(image_dataset_from_directory(dir.path(), {.seed = 1, .validation_split = 0.5, .subset = "both"}),
               InvalidArgumentError);
  EXPECT_THROW(image_dataset_from_directory_both(dir.path(), {}), InvalidArgumentError);
}

TEST(ImageFolder, IteratorResumesFromACheckpoint) {
  TempDir dir;
  for (int i = 0; i < 11; ++i)
    write_png(dir / ("c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".png"), 5 + i, 7, 3, i);
  const auto build = [&] {
    return image_dataset_from_directory(
               dir.path(),
               {.batch_size = std::nullopt, .image_size = {4, 4}, .seed = 9, .num_parallel_calls = 3, .verbose = false})
        .dataset;
  };
  auto describe = [](const Element& e) {
    std::ostringstream os;
    os << e[1].item<std::int32_t>();
    for (float v : e[0].to_vector<float>()) os << ' ' << v;
    return os.str();
  };
  for (int k : {0, 1, 5, 11}) {
    auto it = build().make_iterator();
    for (int i = 0; i < k; ++i) it.next();
    const IteratorState state = it.save();
    auto resumed = build().make_iterator();
    resumed.restore(state);
    std::vector<std::string> a, b;
    while (auto e = it.next()) a.push_back(describe(*e));
    while (auto e = resumed.next()) b.push_back(describe(*e));
    EXPECT_EQ(a, b) << "after " << k;
    EXPECT_EQ(a.size(), static_cast<std::size_t>(11 - k));
  }
}

// ---- against Keras ----

// The folder: PNG (RGB, gray, RGBA, 16-bit) and JPEG (RGB, gray) of several sizes in three classes.
const char* kWriteFolder = R"(
import numpy as np
rng = np.random.default_rng(3)
def img(h, w, c):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(y * (7 + k) + x * (3 + 2 * k)) % 256 for k in range(c)], axis=-1)
    return np.clip(base + rng.integers(-20, 20, base.shape), 0, 255).astype(np.uint8)
def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(path, data)
specs = {"apple": [(30, 40, 3, "png"), (17, 23, 1, "png"), (64, 48, 3, "jpg"), (25, 25, 4, "png")],
         "Banana": [(40, 30, 3, "jpeg"), (12, 50, 3, "png"), (33, 33, 1, "jpg")],
         "cherry": [(20, 24, 3, "png"), (48, 64, 3, "jpg"), (9, 9, 3, "png"), (21, 35, 3, "PNG")],
         "date": [(15, 22, 4, "png"), (26, 18, 3, "png"), (8, 30, 1, "png")]}  # no JPEG: rgba refuses JPEGs
for cls, items in specs.items():
    for i, (h, w, c, ext) in enumerate(items):
        a = img(h, w, c)
        data = tf.io.encode_png(a) if ext.lower() == "png" else tf.io.encode_jpeg(a, quality=85)
        write(f"{root}/{cls}/img{i}.{ext}", data)
# A 16-bit PNG: decode_image(channels=3) as uint8 keeps the high byte, as chorus's codec.
write(f"{root}/cherry/deep.png", tf.io.encode_png(tf.constant(img(10, 14, 3).astype(np.uint16) * 257)))
)";

struct Case {
  const char* name;
  const char* keras;
  ImageFolderOptions options;
  bool elements;  // compare the elements (else the file lists only: the buffer shuffle is chorus's)
};

ImageFolderOptions quiet(ImageFolderOptions o) {
  o.verbose = false;
  return o;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"rgb_bilinear", "image_size=(20, 24), batch_size=4, shuffle=False",
       quiet({.batch_size = 4, .image_size = {20, 24}, .shuffle = false}), true},
      {"gray_nearest",
       "image_size=(13, 9), batch_size=5, shuffle=False, color_mode='grayscale', interpolation='nearest'",
       quiet({.color_mode = "grayscale",
              .batch_size = 5,
              .image_size = {13, 9},
              .shuffle = false,
              .interpolation = "nearest"}),
       true},
      {"rgba_categorical_crop",
       "image_size=(16, 10), batch_size=None, shuffle=False, color_mode='rgba', label_mode='categorical', "
       "crop_to_aspect_ratio=True, class_names=['date']",
       quiet({.label_mode = "categorical",
              .class_names = {"date"},
              .color_mode = "rgba",
              .batch_size = std::nullopt,
              .image_size = {16, 10},
              .shuffle = false,
              .crop_to_aspect_ratio = true}),
       true},
      {"binary_classes",
       "image_size=(8, 8), batch_size=3, shuffle=False, label_mode='binary', "
       "class_names=['cherry', 'apple']",
       quiet({.label_mode = "binary",
              .class_names = {"cherry", "apple"},
              .batch_size = 3,
              .image_size = {8, 8},
              .shuffle = false}),
       true},
      {"no_labels", "image_size=(11, 7), batch_size=6, shuffle=False, label_mode=None",
       quiet({.label_mode = "none", .batch_size = 6, .image_size = {11, 7}, .shuffle = false}), true},
      {"train_s5", "image_size=(8, 8), seed=5, validation_split=0.3, subset='training'",
       quiet({.image_size = {8, 8}, .seed = 5, .validation_split = 0.3, .subset = "training"}), false},
      {"val_s5", "image_size=(8, 8), seed=5, validation_split=0.3, subset='validation', shuffle=False",
       quiet({.image_size = {8, 8}, .shuffle = false, .seed = 5, .validation_split = 0.3, .subset = "validation"}),
       true},
      {"train_s77", "image_size=(8, 8), seed=77, validation_split=0.25, subset='training'",
       quiet({.image_size = {8, 8}, .seed = 77, .validation_split = 0.25, .subset = "training"}), false},
  };
  return c;
}

// Lines: "file <path>" per file, then per element "label <values>" and "image <dtype> <shape> <values>".
std::string fmt(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
std::string values_line(const char* tag, const Tensor& t) {
  std::string s = tag;
  s += ' ';
  s += dtype_name(t.dtype());
  s += " [";
  for (std::size_t d = 0; d < t.shape().dims().size(); ++d) {
    if (d) s += ',';
    s += std::to_string(t.shape().dims()[d]);
  }
  s += "]";
  for (double v : t.to_vector<double>()) {
    s += ' ';
    s += fmt(v);
  }
  return s;
}

std::vector<std::string> chorus_lines(const std::string& root, const Case& c) {
  const ImageFolderDataset ds = image_dataset_from_directory(root, c.options);
  std::vector<std::string> lines;
  for (const auto& p : ds.file_paths) lines.push_back("file " + p);
  if (!c.elements) return lines;
  for (auto it = ds.dataset.make_iterator(); auto e = it.next();) {
    lines.push_back(values_line("image", (*e)[0]));
    if (e->size() > 1) lines.push_back(values_line("label", (*e)[1]));
  }
  return lines;
}

// Equal line by line: "file" lines exactly, "label" exactly, "image" the same dtype and shape and
// values within `tol`. Returns the largest image difference seen.
double expect_same(const std::vector<std::string>& got, const std::vector<std::string>& want, double tol) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (got[i].rfind("image ", 0) != 0) {
      EXPECT_EQ(got[i], want[i]) << "line " << i;
      continue;
    }
    std::istringstream g(got[i]), w(want[i]);
    std::string gt, wt;
    for (int f = 0; f < 3; ++f) {  // "image", dtype, shape
      g >> gt;
      w >> wt;
      EXPECT_EQ(gt, wt) << "line " << i;
    }
    double a, b;
    while (g >> a && w >> b) {
      worst = std::max(worst, std::abs(a - b));
      if (std::abs(a - b) > tol) {
        ADD_FAILURE() << "line " << i << ": " << a << " vs TF's " << b;
        return worst;
      }
    }
    EXPECT_TRUE(g.eof() && (w >> b).eof()) << "line " << i << ": value counts differ";
  }
  return worst;
}

TEST(ImageFolderInterop, ElementsAndFileListsMatchKeras) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  TempDir dir;
  const std::string root = dir / "fruit";
  std::string script = R"(import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
root = sys.argv[1]
)";
  script += kWriteFolder;
  script += "cases = [\n";
  for (const Case& c : cases())
    script +=
        std::string("    (\"") + c.name + "\", " + (c.elements ? "True" : "False") + ", dict(" + c.keras + ")),\n";
  script += R"(]
def line(tag, a):
    a = np.asarray(a)
    return f"{tag} {a.dtype.name} [{','.join(str(d) for d in a.shape)}]" + "".join(" %.9g" % v for v in a.reshape(-1).astype(np.float64))
with open(sys.argv[2], "w") as out:
    for name, elements, kw in cases:
        ds = tf.keras.utils.image_dataset_from_directory(root, verbose=False, **kw)
        out.write(f"case {name}\n")
        for p in ds.file_paths:
            out.write(f"file {p}\n")
        if not elements:
            continue
        for e in ds.as_numpy_iterator():
            e = e if isinstance(e, tuple) else (e,)
            out.write(line("image", e[0]) + "\n")
            if len(e) > 1:
                out.write(line("label", e[1]) + "\n")
)";
  testing::spit(dir.file("keras_cases.py"), script);
  const std::string cmd = "'" + python + "' " + dir.file("keras_cases.py") + " " + root + " " + dir.file("out.txt");
  ASSERT_EQ(chorus::testing::run_interop_command(cmd, "tf"), 0) << cmd;
  std::map<std::string, std::vector<std::string>> keras;
  std::string current;
  std::istringstream text(testing::slurp(dir.file("out.txt")));
  for (std::string l; std::getline(text, l);) {
    if (l.rfind("case ", 0) == 0)
      current = l.substr(5);
    else
      keras[current].push_back(l);
  }
  ASSERT_EQ(keras.size(), cases().size());
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto& want = keras.at(c.name);
    EXPECT_GT(want.size(), 2u);
    const double worst = expect_same(chorus_lines(root, c), want, 1e-3);
    std::cout << "  " << c.name << ": " << want.size() << " lines, largest image difference " << worst << "\n";
  }
  // rgba of a JPEG: TF's map fails ("JPEG does not support 4 channels", InvalidArgumentError), and
  // so does chorus's, for that element only (Banana/img0.jpeg, then img1.png decodes).
  auto it =
      image_dataset_from_directory(
          root, quiet({.class_names = {"Banana"}, .color_mode = "rgba", .batch_size = std::nullopt, .shuffle = false}))
          .dataset.make_iterator();
  try {
    it.next();
    ADD_FAILURE() << "an rgba JPEG decoded";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(e.message().find(root + "/Banana/img0.jpeg"), std::string::npos) << e.message();
  }
  EXPECT_EQ((*it.next())[0].shape(), (Shape{256, 256, 4}));
}

}  // namespace
}  // namespace chorus::data
