// data/mnist.cc: IDX files written byte by byte here (the real format: big-endian magic and dims),
// read back as MNIST arrays and datasets; every malformed file gives its typed error.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/data/data_test_util.h"
#include <chorus/data/mnist.h>

namespace chorus::data {
namespace {

using testing::TempDir;

void put_be32(std::string& s, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(v >> shift & 0xff));
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// n images of rows×cols with pixel (k, r, c) = (k + 3r + 5c) mod 256, and labels (2k + 1) mod 10.
std::uint8_t pixel(int k, int r, int c) { return static_cast<std::uint8_t>((k + 3 * r + 5 * c) % 256); }
std::string images_file(int n, int rows, int cols) {
  std::string s;
  put_be32(s, 0x00000803);
  put_be32(s, static_cast<std::uint32_t>(n));
  put_be32(s, static_cast<std::uint32_t>(rows));
  put_be32(s, static_cast<std::uint32_t>(cols));
  for (int k = 0; k < n; ++k)
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) s.push_back(static_cast<char>(pixel(k, r, c)));
  return s;
}
std::string labels_file(int n) {
  std::string s;
  put_be32(s, 0x00000801);
  put_be32(s, static_cast<std::uint32_t>(n));
  for (int k = 0; k < n; ++k) s.push_back(static_cast<char>((2 * k + 1) % 10));
  return s;
}

TEST(Mnist, ReadsIdxFilesWrittenByHand) {
  TempDir dir;
  spit(dir.file("img"), images_file(3, 28, 28));
  spit(dir.file("lbl"), labels_file(3));
  DigitArrays a = read_mnist(dir.file("img"), dir.file("lbl"));
  EXPECT_EQ(a.images.shape(), Shape({3, 28, 28, 1}));
  EXPECT_EQ(a.images.dtype(), DType::kFloat32);
  EXPECT_EQ(a.labels.shape(), Shape({3}));
  EXPECT_EQ(a.labels.dtype(), DType::kInt32);
  const auto px = a.images.to_vector<float>();
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < 28; ++r)
      for (int c = 0; c < 28; ++c)
        ASSERT_EQ(px[static_cast<std::size_t>((k * 28 + r) * 28 + c)], static_cast<float>(pixel(k, r, c)) / 255.0f);
  EXPECT_EQ(a.labels.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 3, 5}));

  auto ds = mnist_dataset(dir.file("img"), dir.file("lbl"));
  EXPECT_EQ(ds.cardinality(), 3);
  auto it = ds.make_iterator();
  it.next();
  auto e = it.next();
  EXPECT_EQ((*e)[0].shape(), Shape({28, 28, 1}));
  EXPECT_EQ((*e)[0].to_vector<float>()[5], static_cast<float>(pixel(1, 0, 5)) / 255.0f);
  EXPECT_EQ((*e)[1].item<std::int32_t>(), 3);
}

TEST(Mnist, RawIdxRoundTrip) {
  TempDir dir;
  const Tensor t = Tensor::from_vector<std::uint8_t>({1, 2, 3, 250, 251, 252}, {2, 3});
  write_idx(dir.file("x"), t);
  std::ifstream in(dir.file("x"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(bytes.substr(0, 12), std::string("\0\0\x08\x02\0\0\0\x02\0\0\0\x03", 12));
  const Tensor back = read_idx(dir.file("x"));
  EXPECT_EQ(back.shape(), Shape({2, 3}));
  EXPECT_EQ(back.to_vector<std::uint8_t>(), t.to_vector<std::uint8_t>());
}

TEST(Mnist, LoadDigitsUsesStandardNames) {
  TempDir dir;
  spit(dir.file("t10k-images-idx3-ubyte"), images_file(4, 28, 28));
  spit(dir.file("t10k-labels-idx1-ubyte"), labels_file(4));
  EXPECT_EQ(load_digits(std::filesystem::path(dir.file("x")).parent_path().string(), false).cardinality(), 4);
  EXPECT_THROW_WITH(load_digits(std::filesystem::path(dir.file("x")).parent_path().string(), true), NotFoundError,
                    "train-images-idx3-ubyte");
  EXPECT_EQ(load_digits("", false).cardinality(), 10000);  // the built-in synthetic digits
}

TEST(Mnist, MalformedFiles) {
  TempDir dir;
  const std::string img = dir.file("img"), lbl = dir.file("lbl");
  spit(lbl, labels_file(3));
  EXPECT_THROW_WITH(read_mnist(dir.file("missing"), lbl), NotFoundError, dir.file("missing"));

  spit(img, std::string("\x1f\x8b\x08\x00", 4) + "gzipped");
  EXPECT_THROW_WITH(read_idx(img), InvalidArgumentError, "gzip");
  spit(img, std::string("\x01\x02\x08\x03", 4));
  EXPECT_THROW_WITH(read_idx(img), InvalidArgumentError, "magic 0x01020803");
  spit(img, std::string("\0\0\x0d\x01\0\0\0\x01xxxx", 12));
  EXPECT_THROW_WITH(read_idx(img), InvalidArgumentError, "element type 0xd", "0x08");
  spit(img, std::string("\0\0", 2));
  EXPECT_THROW_WITH(read_idx(img), DataLossError, "2 bytes");

  std::string truncated = images_file(3, 28, 28);
  truncated.pop_back();
  spit(img, truncated);
  EXPECT_THROW_WITH(read_idx(img), DataLossError, img, "2367 bytes", "says 2368", "truncated");
  spit(img, images_file(3, 28, 28) + "!");
  EXPECT_THROW_WITH(read_idx(img), DataLossError, "trailing");
  spit(img, images_file(3, 28, 28).substr(0, 10));
  EXPECT_THROW_WITH(read_idx(img), DataLossError, "truncated", "16-byte header");
  std::string huge;
  put_be32(huge, 0x00000803);
  for (int i = 0; i < 3; ++i) put_be32(huge, 0xFFFFFFFFu);
  spit(img, huge);
  EXPECT_THROW(read_idx(img), DataLossError);  // never allocates what the header claims

  spit(img, images_file(4, 28, 28));
  EXPECT_THROW_WITH(read_mnist(img, lbl), InvalidArgumentError, "4 images", "3 labels", img, lbl);
  EXPECT_THROW_WITH(read_mnist(lbl, lbl), InvalidArgumentError, "rank 3", "(3,)");
  spit(img, images_file(3, 28, 28));
  EXPECT_THROW_WITH(read_mnist(img, img), InvalidArgumentError, "rank 1");
}

}  // namespace
}  // namespace chorus::data
