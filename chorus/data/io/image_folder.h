// image_dataset_from_directory (tf.keras.utils.image_dataset_from_directory): a dataset of images
// and labels from a folder of image files with one subfolder per class.
//
//   main_directory/
//     class_a/  a_image_1.jpg  a_image_2.jpg ...
//     class_b/  b_image_1.png ...
//
//   auto train = chorus::data::image_dataset_from_directory(
//       "main_directory", {.image_size = {180, 180}, .seed = 123, .validation_split = 0.2, .subset = "training"});
//   train.class_names;   // {"class_a", "class_b"}
//   for (auto it = train.dataset.make_iterator(); auto batch = it.next();) {
//     const Tensor& images = (*batch)[0];  // float32 [32, 180, 180, 3], values 0..255
//     const Tensor& labels = (*batch)[1];  // int32 [32]
//   }
//
// Semantics are Keras 3.15's (the Keras TensorFlow 2.21 ships as tf.keras; tf_keras 2.21 lists and
// splits the files the same way), keras/src/utils/image_dataset_utils.py and dataset_utils.py:
//   - Files: the class folders are the sorted names of `directory`'s subfolders (links followed,
//     names starting with "." skipped), or `class_names` in its order. Each is walked recursively
//     (os.walk: symlinked folders below it only with follow_links); the walk's folders in path order
//     and their files in name order (byte order); files whose lowercased name ends in .bmp, .gif,
//     .jpeg, .jpg or .png. Paths are directory/class/relative path, joined as os.path.join does.
//     label_mode "none" (or labels "none") ignores the classes and takes every image under
//     `directory`, at any depth.
//   - shuffle: the path list and the label list are shuffled as np.random.RandomState(seed).shuffle
//     does (bit-exact, so the file order and the training/validation split equal Keras's for the
//     same seed); then, as Keras, the (path, label) pairs pass through a seeded buffer shuffle
//     (Dataset::shuffle, buffer 8 × batch_size, or 1024 unbatched) whose order is chorus's own
//     (reproducible for a seed and checkpointable, not TF's). No seed: one is drawn in [0, 10^6)
//     from ops::global_generator() (Keras: np.random.randint(1e6)).
//   - validation_split v: n_val = int(v × n); "training" takes the first n - n_val files of the
//     shuffled list, "validation" the last n_val; "both" returns the two (image_dataset_from_directory_both;
//     the validation set is not shuffled by the buffer then, as in Keras). As in Keras, n_val = 0
//     gives an empty training set (an error) and a validation set of every file.
//   - Each element: read_file, decode_image(channels = 1/3/4 for grayscale/rgb/rgba, first frame
//     only), resize to image_size (ops::image::resize's CPU kernel — TF's half-pixel bilinear or
//     nearest — on the map's worker thread alone, as tf.data's max_intra_op_parallelism = 1) — bilinear
//     gives float32 values 0..255 (not rescaled, as Keras), nearest keeps uint8 (as tf.image.resize
//     does, so Keras's nearest dataset is uint8 too). crop_to_aspect_ratio first crops the largest
//     central window of image_size's aspect ratio (keras.utils.smart_resize's arithmetic).
//     Decoding runs in a parallel map (num_parallel_calls, kAutotune by default), deterministic order,
//     fused with batch(batch_size) as tf.data's map_and_batch: the file indices are batched first
//     and each call loads its batch's images straight into one tensor (the last batch may be
//     smaller); then prefetch(kAutotune). The elements are those of map, then batch.
//   - Labels: "int" int32 []; "categorical" float32 one-hot [num_classes]; "binary" float32 [1]
//     (exactly 2 classes). Batched: a leading batch dimension.
//
// Errors (InvalidArgumentError unless said otherwise, thrown by the call; Keras's ValueError texts):
// an unknown label_mode, color_mode, subset or interpolation; a TF interpolation chorus does not have
// (bicubic, area, lanczos3/5, gaussian, mitchellcubic) → UnimplementedError; image_size or batch_size
// not positive; validation_split outside (0, 1); subset without validation_split or the reverse;
// validation_split with shuffle and no seed; a seed past 2^32 - 1 (numpy's range); "binary" without
// exactly 2 classes; class_names that are not subfolders (or repeated, or given without inferred
// labels); explicit labels not one per file; no images found (in the subset) → naming the directory
// and the allowed formats; a missing directory → NotFoundError (unreadable: PermissionDeniedError).
// Folders below it that cannot be read are skipped, as os.walk does. With follow_links, a folder
// that is already on the path being walked (a symlink loop) is not entered again, and the walk stops
// 40 folders below the class folder (Keras walks a loop until the OS refuses the path, listing its
// files at every level: its file list differs from chorus's then). More than 2^20 folders in one
// class's walk → ResourceExhaustedError.
// While iterating, a file that cannot be read, is not an image, is corrupt, or is a BMP/GIF (not
// decoded by chorus yet) raises the reader's or decoder's error class from the next() that would
// return it — DataLossError for corrupt, truncated or empty data; InvalidArgumentError for bytes
// that are no PNG/JPEG, a FIFO or other non-file, or a JPEG asked for 4 channels (as TF); NotFoundError
// for a dangling link; PermissionDeniedError — with the message "image_dataset_from_directory:
// <path>: <the reader's message>"; the next call continues with the next element (Dataset::map's
// rule; batched, the elements already taken into that batch are lost with it). A file larger than
// kMaxImageFileBytes → ResourceExhaustedError naming it.
//
// Thread-safety: a free function; the returned Dataset is as every Dataset (dataset.h). The files
// are listed when this is called (as Keras does); they are read while iterating.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <chorus/data/dataset.h>

namespace chorus::data {

// The largest image file read (1 GiB): larger → ResourceExhaustedError naming the file.
inline constexpr std::int64_t kMaxImageFileBytes = std::int64_t{1} << 30;

struct ImageFolderOptions {
  // "inferred" (class folders), "none" (no labels), or "explicit": explicit_labels, one per image
  // file in the sorted order of the whole tree (Keras's labels=[...]); class names are then the
  // sorted distinct labels as text.
  std::string labels = "inferred";
  std::vector<std::int64_t> explicit_labels;
  std::string label_mode = "int";                       // int | categorical | binary | none
  std::vector<std::string> class_names;                 // inferred only; empty: every class folder, sorted
  std::string color_mode = "rgb";                       // grayscale | rgb | rgba (1, 3, 4 channels)
  std::optional<std::int64_t> batch_size = 32;          // nullopt: elements are single images
  std::array<std::int64_t, 2> image_size = {256, 256};  // (height, width)
  bool shuffle = true;
  std::optional<std::uint64_t> seed;       // < 2^32
  double validation_split = 0;             // 0: none; else in (0, 1)
  std::string subset;                      // "" | training | validation | both (with validation_split)
  std::string interpolation = "bilinear";  // bilinear | nearest
  bool follow_links = false;
  bool crop_to_aspect_ratio = false;
  std::int64_t num_parallel_calls = kAutotune;  // of the decoding map
  bool verbose = true;  // prints "Found N files belonging to K classes." and the split, as Keras
};

// TF's dataset with its .class_names and .file_paths attributes, and the labels of those files.
struct ImageFolderDataset {
  Dataset dataset;
  std::vector<std::string> class_names;  // empty without labels
  std::vector<std::string> file_paths;   // in the order before the buffer shuffle
  std::vector<std::int64_t> labels;      // the integer label of each file; empty without labels
};

// subset "both" → InvalidArgumentError naming image_dataset_from_directory_both.
ImageFolderDataset image_dataset_from_directory(const std::string& directory, const ImageFolderOptions& options = {});

// subset "both" (options.subset must be "both"): the training and the validation dataset.
std::pair<ImageFolderDataset, ImageFolderDataset> image_dataset_from_directory_both(const std::string& directory,
                                                                                    const ImageFolderOptions& options);

}  // namespace chorus::data
