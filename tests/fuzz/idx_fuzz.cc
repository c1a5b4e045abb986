// libFuzzer target: the IDX (MNIST) reader, data/mnist.h's read_idx (what mnist_dataset and
// chorus-train --data-dir read). It takes a path, so the input is written to a scratch file
// (tests/fuzz/fuzz_util.h). read_idx returns a Tensor, so this target links all of core/ (the
// CPU runtime behind Tensor::from_host; no CUDA).
//
// Contract (mnist.h): InvalidArgumentError for gzip, a bad magic or element type; DataLossError for
// a file shorter or longer than its header says. An accepted file gives a uint8 tensor of rank
// byte 3, with the header's dimensions, holding exactly the bytes after the header.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/core/tensor.h>
#include <chorus/data/mnist.h>

using chorus::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = chorus::fuzz::scratch_file().hold(chorus::fuzz::as_view(data, size));
  chorus::Tensor t;
  try {
    t = chorus::data::read_idx(path);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError, chorus::DataLossError>(e);
    return 0;
  }
  check(size >= 4 && data[0] == 0 && data[1] == 0 && data[2] == 0x08, "accepted magic");
  const int rank = data[3];
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  check(t.dtype() == chorus::DType::kUInt8 && t.shape().rank() == rank, "uint8 tensor of the header's rank");
  for (int d = 0; d < rank; ++d) {
    const std::uint8_t* p = data + 4 + 4 * d;
    const std::int64_t want = std::int64_t{p[0]} << 24 | std::int64_t{p[1]} << 16 | std::int64_t{p[2]} << 8 | p[3];
    check(t.shape().dims()[static_cast<std::size_t>(d)] == want, "the header's dimensions");
  }
  check(size >= header && static_cast<std::size_t>(t.num_elements()) == size - header, "elements fill the file");
  const std::vector<std::uint8_t> values = t.to_vector<std::uint8_t>();
  check(std::equal(values.begin(), values.end(), data + header), "the elements are the file's bytes");
  return 0;
}
