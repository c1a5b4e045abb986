// image_dataset_from_directory: the file list (image_folder_index.cc) into a pipeline of
// (index, label) slices → shuffle → batch → parallel map (read, decode, crop, resize each image of
// the batch into its place) → prefetch.
#include <chorus/data/io/image_folder.h>

#include <algorithm>
#include <memory>

#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/data/internal.h>
#include <chorus/data/io/image_decode.h>
#include <chorus/data/io/image_folder_internal.h>
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cpu/image.h>
#include <chorus/ops/image_geometry.h>

namespace chorus::data {
namespace {

using chorus::internal::str_cat;

// tf.io.read_file, bounded by the file's real size and kMaxImageFileBytes.
std::string read_image_file(const std::string& path) {
  io::File f = io::File::open_for_read(path);
  const std::uint64_t size = f.size();
  CHORUS_REQUIRE(size <= static_cast<std::uint64_t>(kMaxImageFileBytes), ResourceExhaustedError, "the file is ", size,
                 " bytes, more than the ceiling for one image file (kMaxImageFileBytes = ", kMaxImageFileBytes, ")");
  std::string bytes(static_cast<std::size_t>(size), '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    const std::size_t n = f.read_at(got, bytes.data() + got, bytes.size() - got);
    if (n == 0) break;  // the file shrank since fstat: decode what is there (the decoder says if it is cut short)
    got += n;
  }
  bytes.resize(got);
  return bytes;
}

// keras.utils.smart_resize's crop, in its float32 arithmetic: the largest central window of the
// target's aspect ratio. Works on the decoded bytes, before the resize.
Image crop_to_aspect_ratio(const Image& img, std::int64_t target_h, std::int64_t target_w) {
  const std::int64_t h = img.height, w = img.width;
  const auto f32 = [](std::int64_t v) { return static_cast<float>(v); };
  std::int64_t crop_h = static_cast<std::int64_t>(f32(w * target_h) / f32(target_w));
  crop_h = std::max<std::int64_t>(std::min(h, crop_h), 1);
  std::int64_t crop_w = static_cast<std::int64_t>(f32(h * target_w) / f32(target_h));
  crop_w = std::max<std::int64_t>(std::min(w, crop_w), 1);
  const auto h0 = static_cast<std::int64_t>(f32(h - crop_h) / 2);
  const auto w0 = static_cast<std::int64_t>(f32(w - crop_w) / 2);
  if (crop_h == h && crop_w == w) return img;
  Image out;
  out.height = crop_h;
  out.width = crop_w;
  out.channels = img.channels;
  out.dtype = img.dtype;
  const std::size_t c = static_cast<std::size_t>(img.channels);
  out.u8.resize(static_cast<std::size_t>(crop_h * crop_w) * c);
  for (std::int64_t y = 0; y < crop_h; ++y) {
    const std::uint8_t* src = img.u8.data() + (static_cast<std::size_t>((h0 + y) * w + w0)) * c;
    std::copy(src, src + static_cast<std::size_t>(crop_w) * c,
              out.u8.data() + static_cast<std::size_t>(y * crop_w) * c);
  }
  return out;
}

// ops::image::resize's CPU kernels (the same code, so the same values) on the decoded bytes, on
// the calling thread alone, into `dst` (host memory for one image of the plan's size). tf.data
// runs each map call's kernels on one thread (max_intra_op_parallelism = 1); through the op, every
// parallel call would start an OpenMP team of all the cores, and the map's workers × cores threads
// would fight for them (bench_data: 1.1-1.5 ms per 256² → 224² image alone, ~10 ms per image in
// 2-thread teams on the loaded 2-core VM).
void resize_on_this_thread(const Image& img, const internal::ImageFolderPlan& plan, void* dst) {
  const std::array<std::int64_t, 2>& size = plan.options.image_size;
  ops::ResizeGeometry g;
  g.batch = 1;
  g.in_h = img.height;
  g.in_w = img.width;
  g.channels = img.channels;
  g.out_h = size[0];
  g.out_w = size[1];
  g.scale_h = ops::resize_scale(g.in_h, g.out_h);
  g.scale_w = ops::resize_scale(g.in_w, g.out_w);
  ops::cpu::use_threads(1);                     // every op sets its own count again, so this changes nothing else
  if (plan.options.interpolation == "nearest")  // keeps uint8, as TF's
    ops::cpu::resize_nearest(1, img.u8.data(), dst, g);
  else
    ops::cpu::resize_bilinear(DType::kUInt8, img.u8.data(), static_cast<float*>(dst), g);
}

// _load_image_tf: read_file, decode_image(channels, first frame), [crop,] resize, into `dst`.
// Errors name the file.
void load_image(const std::string& path, const internal::ImageFolderPlan& plan, void* dst) {
  try {
    const ImageFolderOptions& o = plan.options;
    const std::string bytes = read_image_file(path);
    Image img = decode_image_values(bytes, {.channels = static_cast<int>(plan.channels)}, path);
    if (o.crop_to_aspect_ratio) img = crop_to_aspect_ratio(img, o.image_size[0], o.image_size[1]);
    resize_on_this_thread(img, plan, dst);
  } catch (const Error& err) {
    // The decoder names the file already; a read or resize error may not: say which file, keep the class.
    throw_error(err.code(), str_cat("image_dataset_from_directory: ", path, ": ", err.message()));
  }
}

// The images of `rows` (file indices), each loaded straight into its place in one tensor
// [rows, height, width, channels] on the pipeline device (through a host tensor when that is a
// GPU): tf.data's map_and_batch fusion, with no tensor per image and no stack. `batched`: false
// for one image (rows has one entry, the result has no batch dimension).
Tensor load_images(const std::vector<std::int64_t>& rows, bool batched, const std::vector<std::string>& paths,
                   const internal::ImageFolderPlan& plan) {
  const std::array<std::int64_t, 2>& size = plan.options.image_size;
  const auto n = static_cast<std::int64_t>(rows.size());
  const Shape shape = batched ? Shape{n, size[0], size[1], plan.channels} : Shape{size[0], size[1], plan.channels};
  const DType dtype = plan.options.interpolation == "nearest" ? DType::kUInt8 : DType::kFloat32;
  const std::string device = internal::pipeline_device();
  // A fresh tensor on a CPU device has no pending work: this thread may write it directly.
  Tensor out = Tensor::empty(shape, dtype, device);
  const bool on_host = !out.device_context().is_gpu();
  Tensor host = on_host ? out : Tensor::empty(shape, dtype, "/CPU:0");
  const std::size_t image_bytes = static_cast<std::size_t>(size[0] * size[1] * plan.channels) * dtype_size(dtype);
  auto* base = static_cast<std::uint8_t*>(host.data());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = rows[static_cast<std::size_t>(i)];
    CHORUS_ENFORCE(row >= 0 && row < static_cast<std::int64_t>(paths.size()), "row ", row);
    load_image(paths[static_cast<std::size_t>(row)], plan, base + static_cast<std::size_t>(i) * image_bytes);
  }
  return on_host ? host : host.to(device);
}

// The label column: int → int32 [n]; categorical → float32 one-hot [n, classes] (rows of zeros for a
// label outside [0, classes), as tf.one_hot); binary → float32 [n, 1].
Tensor label_column(const internal::DirectoryIndex& index, const std::string& mode) {
  const auto n = static_cast<std::int64_t>(index.labels.size());
  if (mode == "int") {
    std::vector<std::int32_t> v(index.labels.begin(), index.labels.end());
    return Tensor::from_vector(v, Shape{n}, "/CPU:0");
  }
  if (mode == "binary") {
    std::vector<float> v(index.labels.begin(), index.labels.end());
    return Tensor::from_vector(v, Shape{n, 1}, "/CPU:0");
  }
  const auto k = static_cast<std::int64_t>(index.class_names.size());
  std::vector<float> v(static_cast<std::size_t>(n * k), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t label = index.labels[static_cast<std::size_t>(i)];
    if (label >= 0 && label < k) v[static_cast<std::size_t>(i * k + label)] = 1.0f;
  }
  return Tensor::from_vector(v, Shape{n, k}, "/CPU:0");
}

// paths_and_labels_to_dataset + batch + prefetch, for one subset's files.
ImageFolderDataset make_dataset(internal::DirectoryIndex files, const internal::ImageFolderPlan& plan, bool shuffle) {
  const ImageFolderOptions& o = plan.options;
  const auto n = static_cast<std::int64_t>(files.file_paths.size());
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) rows[static_cast<std::size_t>(i)] = i;
  std::vector<Tensor> columns{Tensor::from_vector(rows, Shape{n}, "/CPU:0")};
  const bool labelled = o.label_mode != "none";
  if (labelled) columns.push_back(label_column(files, o.label_mode));
  Dataset ds = Dataset::from_tensor_slices(columns);
  if (shuffle) ds = ds.shuffle(o.batch_size ? *o.batch_size * 8 : 1024, plan.seed);

  auto paths = std::make_shared<const std::vector<std::string>>(files.file_paths);
  const bool batched = o.batch_size.has_value();
  // Batched: the rows are batched first and each map call loads a whole batch into one tensor
  // (the same elements as map then batch, without the per-image tensors and the stack's copy).
  if (batched) ds = ds.batch(*o.batch_size);
  auto load = [paths, plan, labelled, batched](const Element& e) -> Element {
    Tensor images = load_images(e.at(0).to_vector<std::int64_t>(), batched, *paths, plan);
    if (!labelled) return Element{std::move(images)};
    return Element{std::move(images), e.at(1)};
  };
  ds = ds.map(load, o.num_parallel_calls);
  ds = ds.prefetch(kAutotune);
  ImageFolderDataset out;
  out.dataset = ds;
  out.class_names = std::move(files.class_names);
  out.file_paths = std::move(files.file_paths);
  out.labels = std::move(files.labels);
  return out;
}

}  // namespace

ImageFolderDataset image_dataset_from_directory(const std::string& directory, const ImageFolderOptions& options) {
  CHORUS_REQUIRE(options.subset != "both", InvalidArgumentError,
                 "image_dataset_from_directory: subset \"both\" returns two datasets: call "
                 "image_dataset_from_directory_both");
  const internal::ImageFolderPlan plan = internal::plan_image_folder(options);
  const internal::DirectoryIndex all = internal::list_image_folder(directory, plan);
  return make_dataset(internal::image_folder_subset(all, directory, plan, plan.options.subset), plan,
                      plan.options.shuffle);
}

std::pair<ImageFolderDataset, ImageFolderDataset> image_dataset_from_directory_both(const std::string& directory,
                                                                                    const ImageFolderOptions& options) {
  CHORUS_REQUIRE(options.subset == "both", InvalidArgumentError,
                 "image_dataset_from_directory_both: options.subset must be \"both\", got \"", options.subset, "\"");
  const internal::ImageFolderPlan plan = internal::plan_image_folder(options);
  const internal::DirectoryIndex all = internal::list_image_folder(directory, plan);
  internal::DirectoryIndex train = internal::image_folder_subset(all, directory, plan, "training");
  internal::DirectoryIndex val = internal::image_folder_subset(all, directory, plan, "validation");
  // As Keras: the validation set is not buffer-shuffled.
  return {make_dataset(std::move(train), plan, plan.options.shuffle), make_dataset(std::move(val), plan, false)};
}

}  // namespace chorus::data
