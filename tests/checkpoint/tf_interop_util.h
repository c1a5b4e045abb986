// Helpers for the tests that check chorus's checkpoints against TensorFlow itself
// (tensorflow_interop_test.cc, tensorflow_keras_interop_test.cc): running tests/checkpoint/
// tf_interop.py with the interop Python (tests/core/interop_python.h), and the "dump" format in
// which arrays travel between C++ and Python — a directory with manifest.tsv (lines
// "key<TAB>dtype<TAB>d0,d1,...<TAB>file") and one raw little-endian, row-major file per array.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/core/interop_python.h"
#include <chorus/checkpoint/trackable.h>
#include <chorus/core/dtype.h>
#include <chorus/core/shape.h>
#include <chorus/core/tensor.h>

namespace chorus::train::testing {

// tests/checkpoint/tf_interop.py (found beside this header, so no build-time definition is needed).
inline std::string tf_interop_script() { return std::string(CHORUS_SOURCE_ROOT) + "/tests/checkpoint/tf_interop.py"; }

// Runs `python tf_interop.py <args>`, echoing its output ("  [tf] ...", without TensorFlow's
// start-up chatter); returns its exit status (-1 when it did not exit normally).
inline int run_tf_interop(const std::string& python, const std::string& args) {
  return chorus::testing::run_interop_command("'" + python + "' '" + tf_interop_script() + "' " + args, "tf");
}

inline std::string quoted(const std::string& s) { return "'" + s + "'"; }

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// A dump's `prefix` file holds a checkpoint path (one line).
inline std::string read_prefix(const std::string& case_dir) {
  std::string p = read_text(case_dir + "/prefix");
  while (!p.empty() && (p.back() == '\n' || p.back() == '\r')) p.pop_back();
  return p;
}

struct Dumped {
  std::string dtype;  // numpy's name: float32, bfloat16, bool, int8, complex64, ...
  Shape shape;
  std::string bytes;  // raw, little-endian, row-major
};

inline std::map<std::string, Dumped> read_dump(const std::string& dir) {
  std::map<std::string, Dumped> out;
  std::ifstream m(dir + "/manifest.tsv");
  EXPECT_TRUE(m.good()) << "no dump at " << dir;
  std::string line;
  while (std::getline(m, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string part; std::getline(ss, part, '\t');) f.push_back(part);
    EXPECT_EQ(f.size(), 4u) << line;
    if (f.size() != 4) continue;
    std::vector<std::int64_t> dims;
    std::stringstream ds(f[2]);
    for (std::string d; std::getline(ds, d, ',');) dims.push_back(std::stoll(d));
    out[f[0]] = {f[1], Shape(dims), read_text(dir + "/" + f[3])};
  }
  return out;
}

inline std::string tensor_bytes(const Tensor& t) {
  std::string b(t.nbytes(), '\0');
  t.copy_to_host(b.data());
  return b;
}

// A host tensor of a dumped array of a chorus dtype.
inline Tensor dumped_tensor(const Dumped& d) {
  return Tensor::from_host(d.bytes.data(), d.shape, parse_dtype(d.dtype), "/CPU:0");
}

inline void write_dump(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& items) {
  std::filesystem::create_directories(dir);
  std::ofstream m(dir + "/manifest.tsv");
  int i = 0;
  for (const auto& [key, t] : items) {
    const std::string name = std::to_string(i++) + ".bin";
    write_text(dir + "/" + name, tensor_bytes(t));
    std::string dims;
    for (std::int64_t d : t.shape().dims()) {
      if (!dims.empty()) dims += ',';
      dims += std::to_string(d);
    }
    m << key << '\t' << dtype_name(t.dtype()) << '\t' << dims << '\t' << name << '\n';
  }
}

// An object with the given named children (a tf.Module, a list or a dict in TF's graph).
class Node final : public Trackable {
 public:
  explicit Node(std::vector<TrackableChild> children) : children_(std::move(children)) {}
  std::vector<TrackableChild> trackable_children() const override { return children_; }

 private:
  std::vector<TrackableChild> children_;
};

inline std::shared_ptr<Node> node(std::vector<TrackableChild> children) {
  return std::make_shared<Node>(std::move(children));
}

// The 100 MiB variable of both directions (tf_interop.py big_values()): float32 [6400, 4096],
// element i = ((i · 2654435761) mod 65536 − 32768) / 8, exact in float32.
inline constexpr std::int64_t kBigRows = 6400, kBigCols = 4096;
inline float big_value(std::int64_t i) {
  return static_cast<float>(static_cast<std::int64_t>((static_cast<std::uint64_t>(i) * 2654435761ull) % 65536) -
                            32768) *
         0.125f;
}

// Where two byte strings of `dtype`-sized elements first differ, for messages ("" when equal).
inline std::string first_difference(const std::string& got, const std::string& want, std::size_t element_size) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return "element " + std::to_string(i / element_size) + " differs";
  }
  return "";
}

}  // namespace chorus::train::testing
