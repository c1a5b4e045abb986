#include <chorus/data/io/png.h>

// png.h includes <setjmp.h> itself (and must come before it).
#include <png.h>
#include <zlib.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <chorus/core/error.h>

namespace chorus::data {

namespace {

// Ancillary chunks (text, ICC profiles) libpng may hold in memory, each: its 1.6 default is
// 8,000,000 bytes; stated here so that the bound is ours, not the build's.
constexpr png_alloc_size_t kChunkMallocMax = png_alloc_size_t{8} << 20;

// What libpng's callbacks share with the decoder. Plain data: it outlives every longjmp.
struct PngIo {
  const unsigned char* data;
  std::size_t size;
  std::size_t pos;  // bytes handed to libpng so far: the offset errors report
  int warnings;
  char message[256];
  // Encoder output (malloc'ed: a callback must never throw through libpng).
  unsigned char* out;
  std::size_t out_size;
  std::size_t out_capacity;
  bool out_of_memory;
};

// Error callback: keeps the message and jumps back to the setjmp of the phase that called libpng.
// Its frame, like every frame between it and that setjmp, holds no C++ object with a destructor.
[[noreturn]] void on_png_error(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof io->message, "%s", message != nullptr ? message : "(no message)");
  png_longjmp(png, 1);
}

void on_png_warning(png_structp png, png_const_charp /*message*/) {
  ++static_cast<PngIo*>(png_get_error_ptr(png))->warnings;  // TF logs them; chorus stays silent
}

void on_png_read(png_structp png, png_bytep dst, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->size - io->pos) {
    io->pos = io->size;
    png_error(png, "the data ends inside a chunk (truncated file)");
  }
  std::memcpy(dst, io->data + io->pos, n);
  io->pos += n;
}

void on_png_write(png_structp png, png_bytep src, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->out_capacity - io->out_size) {
    std::size_t capacity = io->out_capacity < 4096 ? 4096 : io->out_capacity;
    while (capacity - io->out_size < n) capacity *= 2;
    void* grown = std::realloc(io->out, capacity);
    if (grown == nullptr) {
      io->out_of_memory = true;
      png_error(png, "out of memory for the encoded PNG");
    }
    io->out = static_cast<unsigned char*>(grown);
    io->out_capacity = capacity;
  }
  std::memcpy(io->out + io->out_size, src, n);
  io->out_size += n;
}

void on_png_flush(png_structp /*png*/) {}

// The transformations TF's CommonInitDecode asks libpng for (tensorflow/core/lib/png/png_io.cc),
// as a plain struct so the setjmp phase below can take it.
struct PngPlan {
  int channels;    // output channels (0 resolved from the file)
  int bits;        // output sample bits, 8 or 16
  int color_type;  // the file's
  int bit_depth;   // the file's
  bool has_trns;
  bool synthesize16;  // 8-bit samples asked for as uint16: v·257 after decoding, as TF
};

// ---- The phases that call libpng. No C++ objects with destructors in these frames. ----

bool png_phase_read_info(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  return true;
}

bool png_phase_configure(png_structp png, png_infop info, const PngPlan* plan, int* passes) {
  if (setjmp(png_jmpbuf(png))) return false;
  const bool file_alpha = (plan->color_type & PNG_COLOR_MASK_ALPHA) != 0;
  if (plan->channels % 2 == 0) {  // alpha wanted
    if (!file_alpha) {
      if (plan->has_trns)
        png_set_tRNS_to_alpha(png);
      else
        png_set_add_alpha(png, static_cast<png_uint_32>((1 << plan->bit_depth) - 1), PNG_FILLER_AFTER);
    }
  } else if (file_alpha || plan->has_trns) {
    png_set_strip_alpha(png);
  }
  if (plan->bit_depth > 8 && plan->bits == 8) png_set_strip_16(png);
  png_set_packing(png);
  *passes = png_set_interlace_handling(png);
  if (plan->bits == 16 && std::endian::native == std::endian::little) png_set_swap(png);
  if (plan->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  const bool file_gray = (plan->color_type & PNG_COLOR_MASK_COLOR) == 0;
  if (file_gray && plan->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (plan->channels < 3) {
    if (!file_gray) png_set_rgb_to_gray(png, 1, 0.299, 0.587);  // ITU-R BT.601 weights, as TF
  } else if (file_gray) {
    png_set_gray_to_rgb(png);
  }
  png_read_update_info(png, info);
  return true;
}

bool png_phase_read_rows(png_structp png, png_infop info, unsigned char* out, std::size_t stride, png_uint_32 height,
                         int passes) {
  if (setjmp(png_jmpbuf(png))) return false;
  for (int pass = 0; pass < passes; ++pass)  // png_read_row combines the Adam7 passes in place
    for (png_uint_32 y = 0; y < height; ++y) png_read_row(png, out + static_cast<std::size_t>(y) * stride, nullptr);
  png_read_end(png, info);  // the chunks after IDAT (a missing IEND is an error, as in TF)
  return true;
}

bool png_phase_write(png_structp png, png_infop info, const unsigned char* pixels, png_uint_32 height,
                     png_uint_32 width, int bits, int color_type, std::size_t stride, int level) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, 0x7fffffffU, 0x7fffffffU);  // the PNG limit, not libpng's default 10^6
  png_set_compression_level(png, level);
  png_set_compression_mem_level(png, MAX_MEM_LEVEL);
  png_set_IHDR(png, info, width, height, bits, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  if (bits == 16 && std::endian::native == std::endian::little) png_set_swap(png);
  for (png_uint_32 y = 0; y < height; ++y)
    png_write_row(png, const_cast<unsigned char*>(pixels) + static_cast<std::size_t>(y) * stride);
  png_write_end(png, nullptr);
  return true;
}

// ---- C++ side: owns the libpng structs, throws after libpng's frames are gone. ----

struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngReader() = default;
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
  ~PngReader() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

struct PngWriter {
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngIo io{};
  PngWriter() = default;
  PngWriter(const PngWriter&) = delete;
  PngWriter& operator=(const PngWriter&) = delete;
  ~PngWriter() {
    if (png != nullptr) png_destroy_write_struct(&png, info != nullptr ? &info : nullptr);
    std::free(io.out);
  }
};

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

[[noreturn]] void throw_corrupt(const std::string& subject, const PngIo& io) {
  const bool truncated = io.pos == io.size;
  throw DataLossError(chorus::internal::str_cat("decode_png: ", truncated ? "truncated" : "corrupt", " PNG ", subject,
                                                " at byte ", io.pos, " of ", io.size, ": ", io.message));
}

// IHDR's dimensions, read before libpng allocates anything for the image (a signature or IHDR
// that is not there is left to libpng, which reports it).
void precheck_ihdr(std::string_view bytes, const std::string& subject, png_structp png, const DecodeLimits& limits) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 33 || png_sig_cmp(p, 0, 8) != 0 || std::memcmp(p + 12, "IHDR", 4) != 0) return;
  const std::uint32_t width = be32(p + 16), height = be32(p + 20);
  if (width == 0 || height == 0 || width > 0x7fffffffU || height > 0x7fffffffU) return;  // libpng: corrupt
  if (width > png_get_user_width_max(png) || height > png_get_user_height_max(png))
    throw ResourceExhaustedError(
        chorus::internal::str_cat("decode_png: PNG ", subject, " declares ", width, "x", height,
                                  " (width x height) pixels; libpng decodes at most ", png_get_user_width_max(png),
                                  " per side (its default user limit, which TensorFlow has too)"));
  internal::check_image_limits("decode_png", subject, height, width, 1, 1, limits);
}

PngPlan make_plan(png_structp png, png_infop info, const DecodePngOptions& options) {
  PngPlan plan{};
  png_uint_32 width = 0, height = 0;
  png_get_IHDR(png, info, &width, &height, &plan.bit_depth, &plan.color_type, nullptr, nullptr, nullptr);
  plan.has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  plan.bits = options.dtype == ImageDType::kUInt16 ? 16 : 8;
  plan.channels = options.channels;
  if (plan.channels == 0)
    plan.channels = plan.color_type == PNG_COLOR_TYPE_PALETTE ? (plan.has_trns ? 4 : 3) : png_get_channels(png, info);
  plan.synthesize16 = plan.bit_depth <= 8 && plan.bits == 16;
  return plan;
}

}  // namespace

Image decode_png_values(std::string_view bytes, const DecodePngOptions& options, std::string_view what) {
  internal::check_image_channels("decode_png", options.channels);
  CHORUS_REQUIRE(options.dtype != ImageDType::kFloat32, InvalidArgumentError,
                 "decode_png: dtype must be uint8 or uint16, got float32 (decode_image decodes to float32)");
  const std::string subject = internal::image_subject(what, bytes.size());
  if (bytes.empty()) throw DataLossError("decode_png: PNG " + subject + " is empty");

  PngIo io{};
  io.data = reinterpret_cast<const unsigned char*>(bytes.data());
  io.size = bytes.size();
  PngReader r;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, on_png_error, on_png_warning);
  if (r.png != nullptr) r.info = png_create_info_struct(r.png);
  if (r.png == nullptr || r.info == nullptr)
    throw ResourceExhaustedError("decode_png: libpng could not allocate its state");
  png_set_read_fn(r.png, &io, on_png_read);
  png_set_chunk_malloc_max(r.png, kChunkMallocMax);
  precheck_ihdr(bytes, subject, r.png, options.limits);

  if (!png_phase_read_info(r.png, r.info)) throw_corrupt(subject, io);
  const PngPlan plan = make_plan(r.png, r.info, options);
  const std::int64_t height = png_get_image_height(r.png, r.info), width = png_get_image_width(r.png, r.info);
  internal::check_image_limits("decode_png", subject, height, width, plan.channels, plan.bits / 8, options.limits);
  int passes = 1;
  if (!png_phase_configure(r.png, r.info, &plan, &passes)) throw_corrupt(subject, io);
  const std::size_t row_values = static_cast<std::size_t>(width) * static_cast<std::size_t>(plan.channels);
  const std::size_t libpng_row = png_get_rowbytes(r.png, r.info);
  const std::size_t want_row = row_values * (plan.synthesize16 ? 1 : plan.bits / 8);
  if (png_get_channels(r.png, r.info) != plan.channels || libpng_row != want_row)
    throw InternalError(chorus::internal::str_cat(
        "decode_png: libpng's row layout (", int(png_get_channels(r.png, r.info)), " channels, ", libpng_row,
        " bytes) is not the planned (", plan.channels, ", ", want_row, ") for ", subject));

  Image image;
  image.height = height;
  image.width = width;
  image.channels = plan.channels;
  image.dtype = options.dtype;
  const std::size_t n = row_values * static_cast<std::size_t>(height);
  unsigned char* out = nullptr;
  std::size_t stride = 0;
  if (plan.bits == 8) {
    image.u8.assign(n, 0);
    out = image.u8.data();
    stride = row_values;
  } else {
    image.u16.assign(n, 0);
    out = reinterpret_cast<unsigned char*>(image.u16.data());
    stride = row_values * 2;  // libpng writes 8-bit rows at the start of each when synthesizing
  }
  if (!png_phase_read_rows(r.png, r.info, out, stride, static_cast<png_uint_32>(height), passes))
    throw_corrupt(subject, io);
  if (plan.synthesize16) {
    // v·257 (v | v << 8), each row from its end so the 8-bit source is read before it is overwritten.
    for (std::int64_t y = 0; y < height; ++y) {
      const unsigned char* src = out + static_cast<std::size_t>(y) * stride;
      std::uint16_t* dst = image.u16.data() + static_cast<std::size_t>(y) * row_values;
      for (std::size_t x = row_values; x-- > 0;) dst[x] = static_cast<std::uint16_t>(src[x] * 257u);
    }
  }
  return image;
}

Tensor decode_png(std::string_view bytes, const DecodePngOptions& options, std::string_view what) {
  return image_to_tensor(decode_png_values(bytes, options, what));
}

Tensor decode_png(const Tensor& contents, const DecodePngOptions& options, std::string_view what) {
  return decode_png(internal::scalar_contents("decode_png", contents), options, what);
}

Tensor encode_png_tensor(const Tensor& image, int compression) {
  return Tensor::scalar(encode_png(image, compression));
}

std::string encode_png(const void* pixels, std::int64_t height, std::int64_t width, int channels, int bits,
                       int compression) {
  static constexpr int kColorTypes[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                        PNG_COLOR_TYPE_RGB_ALPHA};
  CHORUS_REQUIRE(channels >= 1 && channels <= 4, InvalidArgumentError,
                 "encode_png: PNG images have 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA) channels, got ", channels);
  constexpr std::int64_t kMaxSide = 0x7fffffff;
  CHORUS_REQUIRE(height > 0 && width > 0 && height <= kMaxSide && width <= kMaxSide, InvalidArgumentError,
                 "encode_png: PNG image size ", height, "x", width, " is invalid (each side 1 to 2^31-1)");
  CHORUS_REQUIRE(bits == 8 || bits == 16, InvalidArgumentError, "encode_png: bits must be 8 or 16, got ", bits);
  CHORUS_REQUIRE(compression >= -1 && compression <= 9, InvalidArgumentError,
                 "encode_png: compression must be in [-1, 9], got ", compression);
  CHORUS_REQUIRE(pixels != nullptr, InvalidArgumentError, "encode_png: pixels is null");

  PngWriter w;
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w.io, on_png_error, on_png_warning);
  if (w.png != nullptr) w.info = png_create_info_struct(w.png);
  if (w.png == nullptr || w.info == nullptr)
    throw ResourceExhaustedError("encode_png: libpng could not allocate its state");
  png_set_write_fn(w.png, &w.io, on_png_write, on_png_flush);
  const std::size_t stride =
      static_cast<std::size_t>(width) * static_cast<std::size_t>(channels) * static_cast<std::size_t>(bits / 8);
  if (!png_phase_write(w.png, w.info, static_cast<const unsigned char*>(pixels), static_cast<png_uint_32>(height),
                       static_cast<png_uint_32>(width), bits, kColorTypes[channels - 1], stride,
                       compression < 0 ? Z_DEFAULT_COMPRESSION : compression)) {
    if (w.io.out_of_memory) throw ResourceExhaustedError(std::string("encode_png: ") + w.io.message);
    throw InternalError(std::string("encode_png: libpng failed: ") + w.io.message);
  }
  return std::string(reinterpret_cast<const char*>(w.io.out), w.io.out_size);
}

std::string encode_png(const Image& image, int compression) {
  CHORUS_REQUIRE(image.dtype != ImageDType::kFloat32, InvalidArgumentError,
                 "encode_png: the image must be uint8 or uint16, got float32");
  const bool wide = image.dtype == ImageDType::kUInt16;
  const std::size_t have = wide ? image.u16.size() : image.u8.size();
  CHORUS_REQUIRE(image.height > 0 && image.width > 0 && image.channels > 0 &&
                     static_cast<std::int64_t>(have) == image.num_values(),
                 InvalidArgumentError, "encode_png: the image holds ", have, " values, not ", image.height, "x",
                 image.width, "x", image.channels);
  return encode_png(wide ? static_cast<const void*>(image.u16.data()) : image.u8.data(), image.height, image.width,
                    image.channels, wide ? 16 : 8, compression);
}

std::string encode_png(const Tensor& image, int compression) {
  CHORUS_REQUIRE(image.defined() && image.shape().rank() == 3, InvalidArgumentError,
                 "encode_png: image must be a 3-D tensor [height, width, channels], got ",
                 image.defined() ? image.shape().to_string() : std::string("an undefined tensor"));
  CHORUS_REQUIRE(image.dtype() == DType::kUInt8 || image.dtype() == DType::kUInt16, InvalidArgumentError,
                 "encode_png: image must be uint8 or uint16, got ", dtype_name(image.dtype()));
  const std::int64_t h = image.shape().dim(0), w = image.shape().dim(1);
  CHORUS_REQUIRE(image.shape().dim(2) >= 1 && image.shape().dim(2) <= 4, InvalidArgumentError,
                 "encode_png: image must have 1 to 4 channels, got shape ", image.shape().to_string());
  const int c = static_cast<int>(image.shape().dim(2));
  if (image.dtype() == DType::kUInt8)
    return encode_png(image.to_vector<std::uint8_t>().data(), h, w, c, 8, compression);
  return encode_png(image.to_vector<std::uint16_t>().data(), h, w, c, 16, compression);
}

}  // namespace chorus::data
