// The file list of image_dataset_from_directory: Keras's index_directory (os.walk, sorted), its
// numpy shuffle and its validation split. See image_folder_internal.h.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <iostream>
#include <set>
#include <utility>

#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/data/io/image_folder_internal.h>
#include <chorus/ops/random.h>

namespace chorus::data::internal {

using chorus::internal::str_cat;

std::uint64_t NumpyRandomState::random_interval(std::uint64_t max) {
  if (max == 0) return 0;
  std::uint64_t mask = max;
  for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
  std::uint64_t value;
  if (max <= 0xffffffffull) {
    do value = next_uint32() & mask;
    while (value > max);
  } else {
    do value = next_uint64() & mask;
    while (value > max);
  }
  return value;
}

std::string path_join(const std::string& a, const std::string& b) {
  if (a.empty() || a.back() == '/') return a + b;
  return a + "/" + b;
}

bool has_image_extension(const std::string& name) {
  static const char* const kFormats[] = {".bmp", ".gif", ".jpeg", ".jpg", ".png"};
  for (const char* ext : kFormats) {
    const std::string e(ext);
    if (name.size() < e.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < e.size() && same; ++i) {
      const char c = name[name.size() - e.size() + i];
      same = (c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) == e[i];
    }
    if (same) return true;
  }
  return false;
}

namespace {

// One folder's names as os.scandir sorts them into os.walk's lists: entries whose stat (links
// followed) says directory are folders; everything else (files, broken links, FIFOs) is a file.
// false when the folder cannot be opened (os.walk's default onerror ignores it).
bool list_folder(const std::string& path, std::vector<std::string>& dirs, std::vector<std::string>& files,
                 int* open_errno = nullptr) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    if (open_errno) *open_errno = errno;
    return false;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    const bool is_dir = ::stat(path_join(path, name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    (is_dir ? dirs : files).push_back(name);
  }
  ::closedir(d);
  return true;
}

bool is_link(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

struct Walk {
  std::string directory;  // for messages
  bool follow_links;
  std::int64_t folders_seen = 0;
  std::vector<std::pair<std::string, std::vector<std::string>>> folders;  // (root, file names)
  std::vector<std::pair<dev_t, ino_t>> ancestors;                         // the folders on the current path
};

// os.walk(top, followlinks), top-down, into w.folders; see index_directory for the loop rule.
void walk(const std::string& top, Walk& w, int depth) {
  struct stat st {};
  if (::stat(top.c_str(), &st) != 0) return;
  const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
  if (std::find(w.ancestors.begin(), w.ancestors.end(), id) != w.ancestors.end()) return;
  CHORUS_REQUIRE(++w.folders_seen <= kMaxWalkFolders, ResourceExhaustedError,
                 "image_dataset_from_directory: more than ", kMaxWalkFolders, " folders under ", w.directory,
                 w.follow_links ? " (with follow_links: symbolic links may make the tree larger than the disk)" : "");
  std::vector<std::string> dirs, files;
  if (!list_folder(top, dirs, files)) return;
  w.folders.emplace_back(top, std::move(files));
  if (w.follow_links && depth >= kMaxWalkDepth) return;
  w.ancestors.push_back(id);
  for (const std::string& name : dirs) {
    const std::string path = path_join(top, name);
    if (w.follow_links || !is_link(path)) walk(path, w, depth + 1);
  }
  w.ancestors.pop_back();
}

// index_subdirectory: the image files under directory/subdir as paths joined to `directory` the
// way Keras joins them (directory, then subdir, then the path below it).
std::vector<std::string> index_subdirectory(const std::string& directory, const std::string& subdir,
                                            bool follow_links) {
  const std::string top = path_join(directory, subdir);
  Walk w{directory, follow_links, 0, {}, {}};
  walk(top, w, 0);
  std::stable_sort(w.folders.begin(), w.folders.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> paths;
  for (auto& [root, files] : w.folders) {
    std::sort(files.begin(), files.end());
    // root is top itself or top joined with the folders below it.
    std::string below = root.substr(top.size());
    if (!below.empty() && below.front() == '/') below.erase(0, 1);
    for (const std::string& f : files)
      if (has_image_extension(f)) paths.push_back(path_join(directory, path_join(subdir, path_join(below, f))));
  }
  return paths;
}

// The class folders of `directory`: sorted names of its folders (links followed), no dot-names.
std::vector<std::string> class_folders(const std::string& directory) {
  std::vector<std::string> dirs, files;
  int err = 0;
  if (!list_folder(directory, dirs, files, &err))
    io::throw_errno(err, "image_dataset_from_directory: cannot list the directory", directory);
  std::vector<std::string> out;
  for (const std::string& d : dirs)
    if (d.front() != '.') out.push_back(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s = "[";
  for (std::size_t i = 0; i < names.size(); ++i) s += str_cat(i ? ", " : "", "'", names[i], "'");
  return s + "]";
}

std::vector<std::string> chosen_classes(const std::string& directory, const std::vector<std::string>& class_names) {
  std::vector<std::string> subdirs = class_folders(directory);
  if (class_names.empty()) return subdirs;
  std::set<std::string> seen;
  for (const std::string& c : class_names) {
    CHORUS_REQUIRE(std::find(subdirs.begin(), subdirs.end(), c) != subdirs.end(), InvalidArgumentError,
                   "image_dataset_from_directory: The `class_names` passed did not match the names of the "
                   "subdirectories of the target directory. Expected: ",
                   join_names(subdirs), " (or a subset of it), but received: class_names=", join_names(class_names));
    CHORUS_REQUIRE(seen.insert(c).second, InvalidArgumentError, "image_dataset_from_directory: class_names names '", c,
                   "' twice: ", join_names(class_names));
  }
  return class_names;
}

}  // namespace

DirectoryIndex index_directory(const std::string& directory, const std::string& labels,
                               const std::vector<std::int64_t>& explicit_labels,
                               const std::vector<std::string>& class_names, bool shuffle, std::uint32_t seed,
                               bool follow_links) {
  CHORUS_REQUIRE(!directory.empty(), InvalidArgumentError, "image_dataset_from_directory: an empty directory name");
  CHORUS_REQUIRE(labels == "inferred" || class_names.empty(), InvalidArgumentError, "image_dataset_from_directory: ",
                 labels == "none" ? "When `labels=None` (no labels), argument `class_names` cannot be specified."
                                  : "When argument `labels` is specified, argument `class_names` cannot be specified "
                                    "(the `class_names` will be the sorted list of labels).");
  DirectoryIndex index;
  if (labels == "inferred") {
    index.class_names = chosen_classes(directory, class_names);
    for (std::size_t c = 0; c < index.class_names.size(); ++c) {
      for (std::string& p : index_subdirectory(directory, index.class_names[c], follow_links)) {
        index.file_paths.push_back(std::move(p));
        index.labels.push_back(static_cast<std::int64_t>(c));
      }
    }
  } else {
    class_folders(directory);  // a missing or unreadable directory is an error here too
    index.file_paths = index_subdirectory(directory, "", follow_links);
    if (labels == "explicit") {
      CHORUS_REQUIRE(explicit_labels.size() == index.file_paths.size(), InvalidArgumentError,
                     "image_dataset_from_directory: Expected the lengths of `labels` to match the number of files in "
                     "the target directory. len(labels) is ",
                     explicit_labels.size(), " while we found ", index.file_paths.size(), " files in directory ",
                     directory, ".");
      index.labels = explicit_labels;
      for (std::int64_t v : std::set<std::int64_t>(explicit_labels.begin(), explicit_labels.end()))
        index.class_names.push_back(std::to_string(v));
    }
  }
  if (shuffle) {
    NumpyRandomState(seed).shuffle(index.file_paths);
    NumpyRandomState(seed).shuffle(index.labels);
  }
  return index;
}

DirectoryIndex training_or_validation_split(const DirectoryIndex& index, double validation_split,
                                            const std::string& subset) {
  if (validation_split == 0) return index;
  const auto n = static_cast<std::int64_t>(index.file_paths.size());
  // Python's int(): truncation toward zero of the double product.
  const auto n_val = static_cast<std::int64_t>(validation_split * static_cast<double>(n));
  // [:-0] is empty and [-0:] is everything, as in Python.
  std::int64_t begin = 0, end = n;
  if (subset == "training") {
    end = n_val == 0 ? 0 : n - n_val;
  } else if (subset == "validation") {
    begin = n_val == 0 ? 0 : n - n_val;
  } else {
    throw InvalidArgumentError(
        str_cat("image_dataset_from_directory: `subset` must be either \"training\" or "
                "\"validation\", received: ",
                subset));
  }
  DirectoryIndex out;
  out.class_names = index.class_names;
  out.file_paths.assign(index.file_paths.begin() + begin, index.file_paths.begin() + end);
  if (!index.labels.empty()) out.labels.assign(index.labels.begin() + begin, index.labels.begin() + end);
  return out;
}

namespace {

constexpr const char* kAllowedFormats = "('.bmp', '.gif', '.jpeg', '.jpg', '.png')";

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

// check_validation_split_arg.
void check_split(const ImageFolderOptions& o) {
  const double v = o.validation_split;
  CHORUS_REQUIRE(v == 0 || (v > 0 && v < 1), InvalidArgumentError,
                 "image_dataset_from_directory: `validation_split` must be between 0 and 1, received: ", v);
  CHORUS_REQUIRE((v != 0) == !o.subset.empty(), InvalidArgumentError,
                 "image_dataset_from_directory: If `subset` is set, `validation_split` must be set, and inversely.");
  CHORUS_REQUIRE(o.subset.empty() || o.subset == "training" || o.subset == "validation" || o.subset == "both",
                 InvalidArgumentError,
                 "image_dataset_from_directory: `subset` must be either \"training\", \"validation\" or \"both\", "
                 "received: ",
                 o.subset);
  CHORUS_REQUIRE(!(v != 0 && o.shuffle && !o.seed), InvalidArgumentError,
                 "image_dataset_from_directory: If using `validation_split` and shuffling the data, you must provide a "
                 "`seed` argument, to make sure that there is no overlap between the training and validation subset.");
}

void check_interpolation(const std::string& interpolation) {
  if (interpolation == "bilinear" || interpolation == "nearest") return;
  for (const char* tf_only : {"bicubic", "area", "lanczos3", "lanczos5", "gaussian", "mitchellcubic"})
    if (interpolation == tf_only)
      throw UnimplementedError(str_cat("image_dataset_from_directory: interpolation \"", interpolation,
                                       "\" is TensorFlow's but not implemented in chorus; use \"bilinear\" or "
                                       "\"nearest\""));
  throw InvalidArgumentError(
      str_cat("image_dataset_from_directory: Argument `interpolation` should be one of "
              "('bilinear', 'nearest', 'bicubic', 'area', 'lanczos3', 'lanczos5', 'gaussian', "
              "'mitchellcubic'). Received: interpolation=",
              interpolation));
}

}  // namespace

ImageFolderPlan plan_image_folder(const ImageFolderOptions& options) {
  ImageFolderPlan plan{options, 0, 3};
  ImageFolderOptions& o = plan.options;
  CHORUS_REQUIRE(o.labels == "inferred" || o.labels == "none" || o.labels == "explicit", InvalidArgumentError,
                 "image_dataset_from_directory: `labels` must be \"inferred\", \"none\" or \"explicit\" (with "
                 "explicit_labels), received: ",
                 o.labels);
  CHORUS_REQUIRE(o.labels == "explicit" || o.explicit_labels.empty(), InvalidArgumentError,
                 "image_dataset_from_directory: explicit_labels given with labels \"", o.labels,
                 "\"; set labels = \"explicit\"");
  CHORUS_REQUIRE(
      o.label_mode == "int" || o.label_mode == "categorical" || o.label_mode == "binary" || o.label_mode == "none",
      InvalidArgumentError,
      "image_dataset_from_directory: `label_mode` argument must be one of \"int\", \"categorical\", "
      "\"binary\", or \"none\". Received: label_mode=",
      o.label_mode);
  if (o.labels == "none" || o.label_mode == "none") o.labels = o.label_mode = "none";
  const std::string color = o.color_mode;
  if (color == "rgb")
    plan.channels = 3;
  else if (color == "rgba")
    plan.channels = 4;
  else if (color == "grayscale")
    plan.channels = 1;
  else
    throw InvalidArgumentError(
        str_cat("image_dataset_from_directory: `color_mode` must be one of {\"rgb\", "
                "\"rgba\", \"grayscale\"}. Received: color_mode=",
                color));
  CHORUS_REQUIRE(o.image_size[0] > 0 && o.image_size[1] > 0, InvalidArgumentError,
                 "image_dataset_from_directory: Invalid `image_size` value. Expected a tuple of 2 positive integers. "
                 "Received: image_size=(",
                 o.image_size[0], ", ", o.image_size[1], ")");
  CHORUS_REQUIRE(!o.batch_size || *o.batch_size > 0, InvalidArgumentError,
                 "image_dataset_from_directory: batch_size must be > 0 (or none for no batching), got ",
                 o.batch_size.value_or(0));
  o.interpolation = lower(o.interpolation);
  check_interpolation(o.interpolation);
  check_split(o);
  if (o.seed) {
    CHORUS_REQUIRE(*o.seed <= 0xffffffffull, InvalidArgumentError, "image_dataset_from_directory: seed ", *o.seed,
                   " is outside numpy's range for RandomState: Seed must be between 0 and 2**32 - 1");
    plan.seed = static_cast<std::uint32_t>(*o.seed);
  } else {
    // np.random.randint(1e6), from chorus's global generator (reproducible after ops::set_seed).
    const auto drawn =
        ops::random_uniform({}, {.minval = 0, .maxval = 1e6, .dtype = DType::kInt64, .device = "/CPU:0"});
    plan.seed = static_cast<std::uint32_t>(drawn.item<std::int64_t>());
    o.seed = plan.seed;
  }
  return plan;
}

DirectoryIndex list_image_folder(const std::string& directory, const ImageFolderPlan& plan) {
  const ImageFolderOptions& o = plan.options;
  DirectoryIndex index =
      index_directory(directory, o.labels, o.explicit_labels, o.class_names, o.shuffle, plan.seed, o.follow_links);
  if (o.verbose) {
    if (o.labels == "none")
      std::cout << str_cat("Found ", index.file_paths.size(), " files.\n");
    else
      std::cout << str_cat("Found ", index.file_paths.size(), " files belonging to ", index.class_names.size(),
                           " classes.\n");
  }
  CHORUS_REQUIRE(o.label_mode != "binary" || index.class_names.size() == 2, InvalidArgumentError,
                 "image_dataset_from_directory: When passing `label_mode=\"binary\"`, there must be exactly 2 "
                 "class_names. Received: class_names=",
                 join_names(index.class_names));
  return index;
}

DirectoryIndex image_folder_subset(const DirectoryIndex& all, const std::string& directory, const ImageFolderPlan& plan,
                                   const std::string& subset) {
  const ImageFolderOptions& o = plan.options;
  DirectoryIndex out = training_or_validation_split(all, o.validation_split, subset);
  if (o.verbose && o.validation_split != 0)
    std::cout << str_cat("Using ", out.file_paths.size(), " files for ", subset, ".\n");
  const std::string which = o.subset == "both" ? subset + " " : "";
  CHORUS_REQUIRE(!out.file_paths.empty(), InvalidArgumentError, "image_dataset_from_directory: No ", which,
                 "images found in directory ", directory, ". Allowed formats: ", kAllowedFormats);
  return out;
}

}  // namespace chorus::data::internal
