#include <chorus/data/mnist.h>

#include <cerrno>

#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/data/internal.h>
#include <chorus/data/synthetic_digits.h>

namespace chorus::data {

using chorus::internal::str_cat;

namespace {

std::uint32_t be32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | std::uint32_t{p[3]};
}

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// The product of an IDX header's dimensions, refused (DataLossError) as soon as it would pass the
// file's `size` bytes — so it cannot overflow. A dimension of 0 makes it 0 wherever it stands:
// a 300x0x0 header is 300 empty images in 0 data bytes, a valid file (numpy reads such a buffer
// as an array of shape (300, 0, 0), and TF's tensors allow it too).
std::uint64_t idx_element_count(const std::vector<std::uint64_t>& dims, std::uint64_t size, const std::string& path) {
  for (std::uint64_t n : dims)
    if (n == 0) return 0;
  std::uint64_t count = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    CHORUS_REQUIRE(count <= size / dims[d], DataLossError, "IDX file ", path,
                   ": its header promises more elements than the file's ", size, " bytes hold (dimension ", d, " is ",
                   dims[d], ", the product of the dimensions up to it more than ", size, ")");
    count *= dims[d];
  }
  return count;
}

// Checks the header's promise (4 + 4·rank bytes + the product of the dims) against the file's real
// size before anything of that size is allocated: a hostile header cannot make the reader
// allocate more than the file holds.
void check_idx_size(const std::string& path) {
  io::File f = io::File::open_for_read(path);
  const std::uint64_t size = f.size();
  std::uint8_t head[4] = {};
  if (f.read(head, 4) < 4 || head[0] != 0 || head[1] != 0 || head[2] != 0x08) return;  // read_idx reports these
  const int rank = head[3];
  std::vector<std::uint8_t> dims(4 * static_cast<std::size_t>(rank));
  if (f.read(dims.data(), dims.size()) < dims.size()) return;
  std::vector<std::uint64_t> n(static_cast<std::size_t>(rank));
  for (int d = 0; d < rank; ++d) n[d] = be32(dims.data() + 4 * d);
  const std::uint64_t count = idx_element_count(n, size, path);
  const std::uint64_t want = 4 + dims.size() + count;
  CHORUS_REQUIRE(want == size, DataLossError, "IDX file ", path, " has ", size, " bytes but its header says ", want,
                 size < want ? " (truncated)" : " (trailing bytes)");
}

}  // namespace

Tensor read_idx(const std::string& path) {
  check_idx_size(path);
  const std::vector<std::uint8_t> bytes = internal::read_file(path, "cannot open IDX file");
  CHORUS_REQUIRE(!(bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b), InvalidArgumentError, "IDX file ", path,
                 " is gzip-compressed; decompress it first (gunzip)");
  CHORUS_REQUIRE(bytes.size() >= 4, DataLossError, "IDX file ", path, " has ", bytes.size(),
                 " bytes, fewer than the 4-byte magic");
  const std::uint32_t magic = be32(bytes.data());
  CHORUS_REQUIRE(bytes[0] == 0 && bytes[1] == 0, InvalidArgumentError, "IDX file ", path, " has magic ", hex(magic),
                 "; an IDX magic is 0x0000TTDD (TT the type, DD the rank), e.g. 0x00000803 for MNIST images");
  CHORUS_REQUIRE(bytes[2] == 0x08, InvalidArgumentError, "IDX file ", path, " has element type 0x", std::hex,
                 int{bytes[2]}, std::dec, " (magic ", hex(magic), "); only 0x08 (unsigned byte, MNIST's) is supported");
  const int rank = bytes[3];
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  CHORUS_REQUIRE(bytes.size() >= header, DataLossError, "IDX file ", path, " is truncated: rank ", rank, " needs a ",
                 header, "-byte header, the file has ", bytes.size(), " bytes");
  std::vector<std::int64_t> dims;
  std::vector<std::uint64_t> udims;
  for (int d = 0; d < rank; ++d) {
    udims.push_back(be32(bytes.data() + 4 + 4 * d));
    dims.push_back(static_cast<std::int64_t>(udims.back()));
  }
  const std::uint64_t count = idx_element_count(udims, bytes.size(), path);
  CHORUS_REQUIRE(bytes.size() == header + count, DataLossError, "IDX file ", path, " has ", bytes.size(),
                 " bytes but its header (shape ", Shape(dims).to_string(), ") says ", header + count,
                 bytes.size() < header + count ? " (truncated)" : " (trailing bytes)");
  return Tensor::from_host(bytes.data() + header, Shape(dims), DType::kUInt8, internal::pipeline_device());
}

void write_idx(const std::string& path, const Tensor& values) {
  CHORUS_REQUIRE(values.defined() && values.dtype() == DType::kUInt8 && values.shape().rank() <= 255,
                 InvalidArgumentError, "write_idx: needs a uint8 tensor of rank <= 255");
  std::vector<std::uint8_t> out = {0, 0, 0x08, static_cast<std::uint8_t>(values.shape().rank())};
  for (std::int64_t d : values.shape().dims()) {
    CHORUS_REQUIRE(d <= 0xFFFFFFFFll, InvalidArgumentError, "write_idx: dimension ", d, " does not fit 32 bits");
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(d) >> s));
  }
  const std::size_t header = out.size();
  out.resize(header + values.nbytes());
  if (values.nbytes() > 0) values.copy_to_host(out.data() + header);
  internal::File f = internal::open_file(path, "wb", "cannot create IDX file");
  if (std::fwrite(out.data(), 1, out.size(), f.get()) != out.size() || std::fflush(f.get()) != 0)
    internal::throw_file_error(errno, "cannot write IDX file", path);
}

DigitArrays read_mnist(const std::string& images_path, const std::string& labels_path) {
  const Tensor images = read_idx(images_path);
  const Tensor labels = read_idx(labels_path);
  CHORUS_REQUIRE(images.shape().rank() == 3, InvalidArgumentError, "MNIST images ", images_path,
                 " must be rank 3 [n, rows, cols] (magic 0x00000803), got shape ", images.shape().to_string());
  CHORUS_REQUIRE(labels.shape().rank() == 1, InvalidArgumentError, "MNIST labels ", labels_path,
                 " must be rank 1 [n] (magic 0x00000801), got shape ", labels.shape().to_string());
  const auto& d = images.shape().dims();
  CHORUS_REQUIRE(d[0] == labels.shape().dims()[0], InvalidArgumentError, "MNIST: ", d[0], " images in ", images_path,
                 " but ", labels.shape().dims()[0], " labels in ", labels_path);
  // Host-side conversion: one pass, no op launches per element.
  const std::vector<std::uint8_t> pixels = images.to_vector<std::uint8_t>();
  std::vector<float> scaled(pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) scaled[i] = static_cast<float>(pixels[i]) / 255.0f;
  const std::string device = internal::pipeline_device();
  DigitArrays out;
  out.images = Tensor::from_host(scaled.data(), Shape{d[0], d[1], d[2], 1}, DType::kFloat32, device);
  const std::vector<std::int32_t> ids = labels.to_vector<std::int32_t>();
  out.labels = Tensor::from_host(ids.data(), Shape{d[0]}, DType::kInt32, device);
  return out;
}

Dataset mnist_dataset(const std::string& images_path, const std::string& labels_path) {
  DigitArrays a = read_mnist(images_path, labels_path);
  return Dataset::from_tensor_slices({a.images, a.labels});
}

Dataset load_digits(const std::string& directory, bool train) {
  if (directory.empty()) return train ? synthetic_digits(60000, 0) : synthetic_digits(10000, 1);
  const std::string base = directory + "/" + (train ? "train" : "t10k");
  return mnist_dataset(base + "-images-idx3-ubyte", base + "-labels-idx1-ubyte");
}

}  // namespace chorus::data
