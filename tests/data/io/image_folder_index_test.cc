// image_dataset_from_directory's file list (data/io/image_folder_index.cc) against Keras's: numpy's
// legacy RandomState shuffle bit for bit, and the file paths and labels of each subset for several
// seeds, splits, class_names, label modes and follow_links, on one tree that TensorFlow writes
// (nested folders, upper-case extensions, files that are not images, a hidden folder, symlinks).
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "tests/core/interop_python.h"
#include "tests/data/data_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/image_folder_internal.h>

namespace chorus::data {
namespace {

using internal::DirectoryIndex;
using internal::NumpyRandomState;
using testing::TempDir;

// "key value value ..." lines, grouped under "case <name>" lines.
std::map<std::string, std::vector<std::string>> read_cases(const std::string& text) {
  std::map<std::string, std::vector<std::string>> out;
  std::string current;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("case ", 0) == 0) {
      current = line.substr(5);
      out[current];
    } else {
      out[current].push_back(line);
    }
  }
  return out;
}

std::string run_python(const std::string& python, const TempDir& dir, const std::string& script,
                       const std::string& args) {
  testing::spit(dir.file("script.py"), script);
  const std::string cmd = "'" + python + "' " + dir.file("script.py") + " " + args + " " + dir.file("out.txt");
  EXPECT_EQ(chorus::testing::run_interop_command(cmd, "tf"), 0) << cmd;
  return testing::slurp(dir.file("out.txt"));
}

TEST(NumpyRandomState, ShuffleIsNumpysLegacyShuffle) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "numpy");
  TempDir dir;
  const std::vector<std::uint32_t> seeds = {0, 1, 42, 1337, 123456, 999999, 4294967295u};
  const std::vector<std::size_t> sizes = {0, 1, 2, 3, 7, 100, 1000, 5000};
  const std::vector<std::uint64_t> wide = {(1ull << 32), (1ull << 40) - 5, (1ull << 63) + 12345};
  const std::string text = run_python(python, dir, R"(import sys
import numpy as np
seeds = [0, 1, 42, 1337, 123456, 999999, 4294967295]
sizes = [0, 1, 2, 3, 7, 100, 1000, 5000]
wide = [1 << 32, (1 << 40) - 5, (1 << 63) + 12345]
with open(sys.argv[1], "w") as out:
    for s in seeds:
        for n in sizes:
            x = list(range(n)); np.random.RandomState(s).shuffle(x)
            out.write(f"case {s} {n}\n" + " ".join(map(str, x)) + "\n")
            a = np.arange(n, dtype=np.int32); np.random.RandomState(s).shuffle(a)
            assert a.tolist() == x
        r = np.random.RandomState(s)
        # randint with uint64 draws random_interval(max) with 64-bit words for these ranges.
        out.write(f"case wide {s}\n" + " ".join(str(r.randint(0, m + 1, dtype=np.uint64)) for m in wide) + "\n")
)",
                                      "");
  const auto cases = read_cases(text);
  for (std::uint32_t s : seeds) {
    for (std::size_t n : sizes) {
      std::vector<std::int64_t> x(n);
      std::iota(x.begin(), x.end(), 0);
      NumpyRandomState(s).shuffle(x);
      std::string got;
      for (std::size_t i = 0; i < n; ++i) {
        if (i) got += ' ';
        got += std::to_string(x[i]);
      }
      const auto& want = cases.at(std::to_string(s) + " " + std::to_string(n));
      ASSERT_EQ(want.size(), 1u);
      EXPECT_EQ(got, want[0]) << "seed " << s << " n " << n;
    }
    NumpyRandomState r(s);
    std::string got;
    for (std::size_t i = 0; i < wide.size(); ++i) {
      if (i) got += ' ';
      got += std::to_string(r.random_interval(wide[i]));
    }
    EXPECT_EQ(got, cases.at("wide " + std::to_string(s)).at(0)) << "seed " << s;
  }
}

TEST(ImageFolderIndex, PathJoinAndExtensions) {
  EXPECT_EQ(internal::path_join("a", "b"), "a/b");
  EXPECT_EQ(internal::path_join("a/", "b"), "a/b");
  EXPECT_EQ(internal::path_join("", "b"), "b");
  EXPECT_EQ(internal::path_join("a", ""), "a/");
  for (const char* yes : {"x.png", "x.PNG", "x.Jpg", "x.jpeg", "x.JPEG", "x.bmp", "x.gif", ".png", "a.b.jpg"})
    EXPECT_TRUE(internal::has_image_extension(yes)) << yes;
  for (const char* no : {"x.pn", "png", "x.tiff", "x.webp", "x.png.txt", "x.jpg~", ""})
    EXPECT_FALSE(internal::has_image_extension(no)) << no;
}

// The tree: three classes (one of them a symlink to another folder), nested folders whose names
// sort around "/", upper-case extensions, non-images, a hidden folder, a top-level image and a
// symlinked folder inside a class.
const char* kWriteTree = R"(
import os
def png(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(path, tf.io.encode_png(tf.zeros([2, 3, 3], tf.uint8)))
for i in range(13): png(f"{root}/ant/img{i}.png")
for name in ["sub/a.png", "sub/b.JPG", "sub-x/c.jpeg", "sub/deeper/d.Png", "sub0/e.gif", "notes.txt", "x.png.bak"]:
    if name.endswith((".txt", ".bak")):
        open(f"{root}/ant/{name}", "w").write("not an image")
    else:
        png(f"{root}/ant/{name}")
for i in range(7): png(f"{root}/Bee/{i:02d}.jpg")
for i in range(9): png(f"{root}/zebra/z{i}.bmp")
png(f"{root}/.hidden/h.png")
png(f"{root}/top.png")
os.makedirs(f"{root}/other/inner", exist_ok=True)
png(f"{root}/other/inner/o.png")
os.symlink(f"{root}/other", f"{root}/ant/linked")
os.symlink(f"{root}/other", f"{root}/zz_alias")
)";

// A case: its name, Keras's keyword arguments, and chorus's options (verbose off).
struct Case {
  const char* name;
  const char* keras;
  ImageFolderOptions options;
};

ImageFolderOptions opts(ImageFolderOptions o) {
  o.verbose = false;
  return o;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"sorted", "shuffle=False", opts({.shuffle = false})},
      {"seed1", "seed=1", opts({.seed = 1})},
      {"seed42", "seed=42", opts({.seed = 42})},
      {"seed123456", "seed=123456", opts({.seed = 123456})},
      {"train02_s7", "seed=7, validation_split=0.2, subset='training'",
       opts({.seed = 7, .validation_split = 0.2, .subset = "training"})},
      {"val02_s7", "seed=7, validation_split=0.2, subset='validation'",
       opts({.seed = 7, .validation_split = 0.2, .subset = "validation"})},
      {"train03_s99", "seed=99, validation_split=0.3, subset='training'",
       opts({.seed = 99, .validation_split = 0.3, .subset = "training"})},
      {"val03_s99", "seed=99, validation_split=0.3, subset='validation'",
       opts({.seed = 99, .validation_split = 0.3, .subset = "validation"})},
      {"val_noshuffle", "shuffle=False, validation_split=0.25, subset='validation'",
       opts({.shuffle = false, .validation_split = 0.25, .subset = "validation"})},
      {"class_names", "class_names=['zebra', 'ant'], seed=5", opts({.class_names = {"zebra", "ant"}, .seed = 5})},
      {"no_labels", "label_mode=None, seed=3", opts({.label_mode = "none", .seed = 3})},
      {"follow", "follow_links=True, seed=11", opts({.seed = 11, .follow_links = true})},
      {"follow_sorted", "follow_links=True, shuffle=False", opts({.shuffle = false, .follow_links = true})},
  };
  return c;
}

std::vector<std::string> chorus_lines(const std::string& root, const ImageFolderOptions& options) {
  const auto plan = internal::plan_image_folder(options);
  const DirectoryIndex all = internal::list_image_folder(root, plan);
  const DirectoryIndex sub = internal::image_folder_subset(all, root, plan, options.subset);
  std::vector<std::string> lines;
  std::string names = "classes";
  for (const auto& c : sub.class_names) names += " " + c;
  lines.push_back(names);
  for (std::size_t i = 0; i < sub.file_paths.size(); ++i)
    lines.push_back(sub.file_paths[i] + "\t" + (sub.labels.empty() ? "-" : std::to_string(sub.labels[i])));
  return lines;
}

TEST(ImageFolderIndex, FileListsAndLabelsMatchKeras) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  TempDir dir;
  const std::string root = dir.str("images");
  std::string script = R"(import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
from keras.src.utils import dataset_utils, image_dataset_utils
root = sys.argv[1]
)";
  script += kWriteTree;
  script += "cases = [\n";
  for (const Case& c : cases()) script += std::string("    (\"") + c.name + "\", dict(" + c.keras + ")),\n";
  script += R"(]
with open(sys.argv[2], "w") as out:
    for name, kw in cases:
        ds = tf.keras.utils.image_dataset_from_directory(root, verbose=False, **kw)
        # The labels of those files, as Keras computed them (the dataset holds them decoded only).
        labels = "inferred" if kw.get("label_mode", "int") else None
        seed = kw.get("seed")
        paths, labs, classes = dataset_utils.index_directory(
            root, labels, formats=image_dataset_utils.ALLOWLIST_FORMATS, class_names=kw.get("class_names"),
            shuffle=kw.get("shuffle", True), seed=seed, follow_links=kw.get("follow_links", False), verbose=False)
        paths, labs = dataset_utils.get_training_or_validation_split(
            paths, labs, kw.get("validation_split"), kw.get("subset"))
        assert list(paths) == list(ds.file_paths), (name, paths, ds.file_paths)
        out.write(f"case {name}\n")
        out.write("classes" + "".join(" " + c for c in (ds.class_names or [])) + "\n")
        for i, p in enumerate(ds.file_paths):
            out.write(p + "\t" + ("-" if labs is None else str(int(labs[i]))) + "\n")
)";
  const auto keras = read_cases(run_python(python, dir, script, root));
  ASSERT_EQ(keras.size(), cases().size());
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto& want = keras.at(c.name);
    EXPECT_GT(want.size(), 3u);
    EXPECT_EQ(chorus_lines(root, c.options), want) << "Keras: " << c.keras;
  }
  // A root given with a trailing slash keeps Keras's joins.
  EXPECT_EQ(chorus_lines(root + "/", cases()[0].options)[1], root + "/Bee/00.jpg\t0");
}

// Keras's argument errors (ValueError → InvalidArgumentError), checked before the folder is read.
TEST(ImageFolderIndex, ArgumentErrorsAsKeras) {
  auto error = [](ImageFolderOptions o) -> std::string {
    o.verbose = false;
    try {
      internal::plan_image_folder(o);
    } catch (const InvalidArgumentError& e) {
      return e.message();
    }
    return "no error";
  };
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(error({.label_mode = "sparse"}), "`label_mode` argument must be one of"));
  EXPECT_TRUE(has(error({.color_mode = "cmyk"}), "`color_mode` must be one of"));
  EXPECT_TRUE(has(error({.image_size = {0, 5}}), "Invalid `image_size` value"));
  EXPECT_TRUE(has(error({.batch_size = 0}), "batch_size must be > 0"));
  EXPECT_TRUE(has(error({.interpolation = "cubic"}), "Argument `interpolation` should be one of"));
  EXPECT_TRUE(has(error({.seed = 1, .validation_split = 1.0, .subset = "training"}),
                  "`validation_split` must be between 0 and 1, received: 1"));
  EXPECT_TRUE(has(error({.seed = 1, .validation_split = -0.1, .subset = "training"}), "must be between 0 and 1"));
  EXPECT_TRUE(has(error({.seed = 1, .subset = "training"}), "If `subset` is set, `validation_split` must be set"));
  EXPECT_TRUE(has(error({.seed = 1, .validation_split = 0.2}), "If `subset` is set, `validation_split` must be set"));
  EXPECT_TRUE(has(error({.seed = 1, .validation_split = 0.2, .subset = "test"}), "`subset` must be either"));
  EXPECT_TRUE(has(error({.validation_split = 0.2, .subset = "training"}), "you must provide a `seed` argument"));
  EXPECT_TRUE(has(error({.seed = 1ull << 32}), "Seed must be between 0 and 2**32 - 1"));
  EXPECT_TRUE(has(error({.labels = "folders"}), "`labels` must be"));
  EXPECT_TRUE(has(error({.explicit_labels = {1, 2}}), "explicit_labels given with labels"));
  // Without a shuffle the split needs no seed (Keras's rule), and "Bilinear" is lowercased as Keras does.
  EXPECT_EQ(error({.shuffle = false, .validation_split = 0.2, .subset = "training", .interpolation = "Bilinear"}),
            "no error");
  EXPECT_THROW(internal::plan_image_folder({.interpolation = "bicubic"}), UnimplementedError);
  // No seed: one drawn in [0, 10^6), reproducible after ops::set_seed.
  const auto a = internal::plan_image_folder({.verbose = false});
  EXPECT_LT(a.seed, 1000000u);
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(internal::plan_image_folder({.color_mode = "grayscale"}).channels, 1);
  EXPECT_EQ(internal::plan_image_folder({.color_mode = "rgba"}).channels, 4);
  // label_mode none turns the labels off (the whole tree is listed), as Keras.
  EXPECT_EQ(internal::plan_image_folder({.label_mode = "none", .seed = 1}).options.labels, "none");
}

}  // namespace
}  // namespace chorus::data
