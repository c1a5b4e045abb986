// The file-listing half of image_dataset_from_directory (image_folder.h), apart so that tests can
// check it against Keras's without decoding an image. Not installed.
//
// What Keras 3.15 (the Keras TF 2.21 ships as tf.keras) does, in keras/src/utils/dataset_utils.py,
// and what each function here reproduces:
//   - index_directory: the class folders (sorted os.listdir, folders only, no dot-names), each
//     walked by os.walk (recursively; symlinked folders entered only with follow_links), the walk's
//     folders sorted by path and each folder's files sorted by name, kept when the lowercased name
//     ends with an allowed extension; paths joined as os.path.join does; then, with shuffle, the
//     paths and the labels each shuffled by np.random.RandomState(seed).shuffle.
//   - training_or_validation_split: get_training_or_validation_split.
//   - NumpyRandomState: numpy's legacy RandomState — MT19937 seeded by init_genrand, 32-bit draws
//     tempered as in the reference, shuffle by Fisher–Yates from the end with random_interval's
//     masked rejection sampler — so the permutation is numpy's, bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <chorus/data/io/image_folder.h>

namespace chorus::data::internal {

// np.random.RandomState(seed) for its shuffle. Not thread-safe.
class NumpyRandomState {
 public:
  // numpy's legacy seeding of an integer seed (0 <= seed < 2^32; the caller checks the range).
  explicit NumpyRandomState(std::uint32_t seed) : mt_(seed) {}
  // mt19937_next32: std::mt19937 is the same generator (init_genrand seeding, same tempering).
  std::uint32_t next_uint32() { return static_cast<std::uint32_t>(mt_()); }
  // mt19937_next64: two 32-bit draws, the first one high.
  std::uint64_t next_uint64() {
    const std::uint64_t hi = next_uint32();
    return hi << 32 | next_uint32();
  }
  // random_interval(max): uniform in [0, max], drawing masked words until one is <= max.
  std::uint64_t random_interval(std::uint64_t max);
  // RandomState.shuffle(x) of a sequence or a 1-D array: for i = n-1 down to 1, swap x[i] and
  // x[random_interval(i)].
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (std::size_t i = x.size(); i-- > 1;) std::swap(x[i], x[random_interval(i)]);
  }

 private:
  std::mt19937 mt_;
};

// os.path.join(a, b) for a relative b: a + "/" + b, without a second "/" when a is empty or ends
// with one.
std::string path_join(const std::string& a, const std::string& b);

// Keras's ALLOWLIST_FORMATS: .bmp .gif .jpeg .jpg .png, matched case-insensitively.
bool has_image_extension(const std::string& name);

struct DirectoryIndex {
  std::vector<std::string> file_paths;
  std::vector<std::int64_t> labels;      // one per file; empty without labels
  std::vector<std::string> class_names;  // empty without labels
};

// dataset_utils.index_directory. labels: "inferred" (from the class folders), "explicit"
// (explicit_labels, one per file in the sorted walk order of the whole tree) or "none".
// class_names (inferred only): the classes to index, in this order; each must be a class folder.
// seed: used only with shuffle. Errors: a missing directory → NotFoundError; class_names not among
// the folders, repeated, or given without inferred labels; explicit labels not one per file →
// InvalidArgumentError; more than kMaxWalkFolders folders in one class's walk →
// ResourceExhaustedError. Folders that cannot be read are skipped, as os.walk does. With
// follow_links, a folder already on the path being walked (a symlink loop) is not entered again,
// and nothing deeper than kMaxWalkDepth folders below a class folder is entered (Python walks a
// loop until the OS refuses the path, listing its files again at every level).
inline constexpr int kMaxWalkDepth = 40;
inline constexpr std::int64_t kMaxWalkFolders = std::int64_t{1} << 20;
DirectoryIndex index_directory(const std::string& directory, const std::string& labels,
                               const std::vector<std::int64_t>& explicit_labels,
                               const std::vector<std::string>& class_names, bool shuffle, std::uint32_t seed,
                               bool follow_links);

// get_training_or_validation_split on file_paths and labels together: with validation_split 0,
// everything; otherwise n_val = int(validation_split * n) and "training" keeps [0, n - n_val),
// "validation" [n - n_val, n) — as Python's slices [:-n_val] and [-n_val:], so n_val == 0 gives
// an empty training set and a validation set of everything, as Keras does.
DirectoryIndex training_or_validation_split(const DirectoryIndex& index, double validation_split,
                                            const std::string& subset);

// The options of image_dataset_from_directory checked in Keras's order (image_folder.h lists the
// errors), with the seed drawn when none is given and the derived values.
struct ImageFolderPlan {
  ImageFolderOptions options;  // labels and label_mode both "none" when either is
  std::uint32_t seed = 0;
  std::int64_t channels = 3;
};
ImageFolderPlan plan_image_folder(const ImageFolderOptions& options);

// index_directory with the plan's options, the "binary needs 2 classes" check, and with
// options.verbose Keras's "Found N files belonging to K classes." on stdout.
DirectoryIndex list_image_folder(const std::string& directory, const ImageFolderPlan& plan);

// training_or_validation_split for `subset` ("" with no split), with Keras's message when it is
// empty ("No images found in directory ...", or "No training/validation images found ..." for
// subset "both") and, with verbose, "Using N files for training." on stdout.
DirectoryIndex image_folder_subset(const DirectoryIndex& all, const std::string& directory, const ImageFolderPlan& plan,
                                   const std::string& subset);

}  // namespace chorus::data::internal
