// Shared by the data module's .cc files; not part of the public API (not installed).
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <chorus/data/dataset.h>
#include <chorus/data/stdio_file.h>

namespace chorus::data::internal {

// The pipeline device of the calling thread (see dataset.h): its DeviceScope's spec when that names
// a device type (index 0 when it names none), else "/CPU:0".
std::string pipeline_device();

// Where string tensors of a pipeline on `device` go: `device` itself when it is a CPU device,
// else "/CPU:0" (string tensors live in host memory; TF runs tf.data on the host anyway).
std::string host_device_for(const std::string& device);

// Row `i` of `c` along axis 0 (shape c.shape()[1:]) on c's device: from_tensor_slices and unbatch.
// Numeric components go through ops::slice; string components (which ops refuse) are copied
// element by element.
Tensor slice_row(const Tensor& c, std::int64_t i);
// `parts` (one dtype and shape, checked by the caller) stacked on a new axis 0, on parts[0]'s
// device: batch. Numeric through ops::stack, strings element by element.
Tensor stack_rows(const std::vector<Tensor>& parts);

// Where a one-input transformation saves its input iterator's state: "<prefix>input/".
inline std::string input_prefix(const std::string& prefix) { return prefix + "input/"; }

// The cardinality of batches of `batch` over `n` elements (unknown and infinite stay as they are):
// batch and padded_batch.
inline std::int64_t batched_cardinality(std::int64_t n, std::int64_t batch, bool drop_remainder) {
  if (n < 0) return n;
  return drop_remainder ? n / batch : (n + batch - 1) / batch;
}

// batch / padded_batch: InvalidArgumentError unless every element of `rows` has as many
// components as rows[0], each of the same dtype and rank (and, with same_shape, the same shape).
// The message names the element's index in the batch, the component, and both values.
void check_batch_structure(const char* op, const std::vector<Element>& rows, bool same_shape);

// SplitMix64 (Steele, Lea, Flood 2014): the state advances by a constant and the output is a
// bijective mix of it, so the whole generator state is one uint64 (saved as an int64) and the
// numbers are the same on every machine. Used by shuffle and synthetic_digits.
inline std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() { return splitmix64_mix(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, n), n > 0, without modulo bias (rejection of the short top range).
  std::uint64_t uniform(std::uint64_t n) {
    const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
    std::uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

// Element and error (de)serialization into IteratorState under `key`.
void save_element(IteratorState& state, const std::string& key, const Element& element);
Element load_element(const IteratorState& state, const std::string& key);
// An exception as (code, message): chorus::Error keeps its code, anything else is kUnknown.
void save_error(IteratorState& state, const std::string& key, const std::exception_ptr& error);
std::exception_ptr load_error(const IteratorState& state, const std::string& key);

// Files (data/stdio_file.h), and OS errors as typed exceptions naming the path (ENOENT/ENOTDIR →
// NotFoundError, EACCES/EPERM/EROFS → PermissionDeniedError, ENOSPC/EDQUOT/EFBIG →
// ResourceExhaustedError, else UnknownError with strerror).
using File = StdioFile;
[[noreturn]] void throw_file_error(int err, const std::string& what, const std::string& path);
// fopen that throws as above; `what` starts the message ("cannot open IDX file"). Reading goes
// through io::File::open_for_read (a FIFO, directory or device is refused). Writing ("wb")
// truncates `path`, following a symlink there: for files the user names, never for temporaries.
File open_file(const std::string& path, const char* mode, const std::string& what);
// Creates `path` for writing with O_CREAT | O_EXCL | O_NOFOLLOW (io::File::create_new): nothing
// planted there — a file, a symlink — is ever followed or truncated (AlreadyExistsError). Every
// temporary file data/ writes is made by this.
File create_new_file(const std::string& path, const std::string& what);
// The whole file.
std::vector<std::uint8_t> read_file(const std::string& path, const std::string& what);

}  // namespace chorus::data::internal
