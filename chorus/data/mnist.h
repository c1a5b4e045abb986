// MNIST in its own file format, IDX (http://yann.lecun.com/exdb/mnist/), as
// tf.keras.datasets.mnist.load_data returns it, plus a loader that falls back to the built-in
// synthetic digits when no data directory is given.
//
//   auto train = chorus::data::mnist_dataset("/data/mnist/train-images-idx3-ubyte",
//                                            "/data/mnist/train-labels-idx1-ubyte");
//   // elements: (image [28, 28, 1] float32 in [0, 1], label int32)
//
// IDX layout (all integers big-endian): bytes 0-1 zero, byte 2 the element type (0x08 = uint8,
// the only type MNIST uses and the only one read here), byte 3 the number of dimensions d, then
// d uint32 sizes, then the elements row-major. So images start with magic 0x00000803 ([n, rows,
// cols]) and labels with 0x00000801 ([n]). Files must be uncompressed (gunzip the downloads).
//
// Errors: a missing file → NotFoundError with the path; a gzip file, a bad magic, a type other than
// uint8, an image file that is not rank 3 or a label file not rank 1 → InvalidArgumentError naming
// the value; a file shorter or longer than its header says → DataLossError with the path and both
// sizes; images and labels of different counts → InvalidArgumentError naming both counts and files.
// A dimension of 0 is legal, as in numpy: a 300x0x0 header with no data bytes is a [300, 0, 0]
// tensor (300 empty images); dimensions whose product the file cannot hold → DataLossError
// "promises more elements than the file's N bytes hold", naming the dimension.
// Everything here reads whole files on the calling thread; tensors are created on the pipeline
// device (dataset.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/core/tensor.h>
#include <chorus/data/dataset.h>

namespace chorus::data {

// An IDX file of uint8 elements as a uint8 tensor of its shape.
Tensor read_idx(const std::string& path);
// Writes a uint8 tensor as an IDX file (magic 0x00000800 + its rank). For tests and tools.
void write_idx(const std::string& path, const Tensor& values);

// Images [n, rows, cols, 1] float32 (bytes / 255) and labels [n] int32.
struct DigitArrays {
  Tensor images;
  Tensor labels;
};
DigitArrays read_mnist(const std::string& images_path, const std::string& labels_path);
// from_tensor_slices of read_mnist: elements (image [rows, cols, 1] float32, label int32).
Dataset mnist_dataset(const std::string& images_path, const std::string& labels_path);

// The standard MNIST file names in `directory`: train ("train-images-idx3-ubyte",
// "train-labels-idx1-ubyte") or test ("t10k-..."). With an empty directory: the built-in
// synthetic_digits set instead (60,000 train elements with seed 0, 10,000 test elements with seed
// 1), so programs run without a download.
Dataset load_digits(const std::string& directory, bool train);

}  // namespace chorus::data
