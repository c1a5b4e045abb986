#include <chorus/data/io/jpeg.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <chorus/core/error.h>

namespace chorus::data {

namespace {

// libjpeg's error manager, extended: fatal errors jump back to the phase that called libjpeg;
// messages are kept here, never printed.
struct JpegErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  int code;                            // msg_code of the fatal error
  char message[JMSG_LENGTH_MAX];       // its text
  char last_warning[JMSG_LENGTH_MAX];  // the last warning's text ("Premature end of JPEG file")
};

[[noreturn]] void on_jpeg_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrors*>(cinfo->err);
  err->code = cinfo->err->msg_code;
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void on_jpeg_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* err = reinterpret_cast<JpegErrors*>(cinfo->err);
  ++cinfo->err->num_warnings;
  (*cinfo->err->format_message)(cinfo, err->last_warning);
}

void on_jpeg_output(j_common_ptr /*cinfo*/) {}

// A memory source with TensorFlow's end-of-data behaviour (tensorflow/core/lib/jpeg/jpeg_handle.cc,
// as TF 2.21 behaves): without try_recover_truncated the decoder suspends where the data ends
// (jpeg_read_scanlines then returns 0 rows: the rows so far are kept); with it a fake EOI marker is
// fed once, and data wanted after that is a fatal error.
// All the data is handed over at once, so any call to fill_input_buffer means the data has ended
// (libjpeg's marker and Huffman readers keep their own copies of the position and may call it
// while src->bytes_in_buffer is stale and non-zero; TF's source then returns TRUE with nothing new
// under try_recover_truncated and loops forever — chorus never returns TRUE without new bytes).
struct JpegSource {
  jpeg_source_mgr pub;
  const JOCTET* data;
  std::size_t size;
  bool recover;
  bool exhausted;
  bool fake_eoi_fed;
};

const JOCTET kFakeEoi[2] = {0xFF, JPEG_EOI};

void source_init(j_decompress_ptr cinfo) {
  auto* src = reinterpret_cast<JpegSource*>(cinfo->src);
  src->pub.next_input_byte = src->data;
  src->pub.bytes_in_buffer = src->size;
}

boolean source_fill(j_decompress_ptr cinfo) {
  auto* src = reinterpret_cast<JpegSource*>(cinfo->src);
  src->exhausted = true;
  if (!src->recover) return FALSE;  // suspend: the data ends here
  if (src->fake_eoi_fed) ERREXIT(cinfo, JERR_FILE_READ);
  WARNMS(cinfo, JWRN_JPEG_EOF);
  src->fake_eoi_fed = true;
  src->pub.next_input_byte = kFakeEoi;
  src->pub.bytes_in_buffer = 2;
  return TRUE;
}

void source_skip(j_decompress_ptr cinfo, long n) {
  auto* src = reinterpret_cast<JpegSource*>(cinfo->src);
  if (n <= 0) return;
  if (static_cast<unsigned long>(n) > src->pub.bytes_in_buffer) {
    src->pub.next_input_byte += src->pub.bytes_in_buffer;
    src->pub.bytes_in_buffer = 0;
    (void)source_fill(cinfo);  // the fake EOI, or nothing (the next read suspends)
  } else {
    src->pub.next_input_byte += n;
    src->pub.bytes_in_buffer -= static_cast<std::size_t>(n);
  }
}

void source_term(j_decompress_ptr /*cinfo*/) {}

// Bytes the decoder has taken from the input (all of them once the fake EOI is fed).
std::size_t source_offset(const JpegSource& src) {
  if (src.exhausted || src.fake_eoi_fed) return src.size;
  return src.size - src.pub.bytes_in_buffer;
}

enum PhaseResult { kPhaseOk = 0, kPhaseError = 1, kPhaseSuspended = 2 };

// Plain parameters and results of the decode phases (they cross setjmp).
struct JpegJob {
  int channels;  // resolved: 1 or 3
  int ratio;
  bool fancy_upscaling;
  bool recover;
  J_DCT_METHOD dct_method;
  bool cmyk;                // decoded as CMYK, converted to RGB row by row
  unsigned char* out;       // output_height · output_width · channels bytes
  unsigned char* cmyk_row;  // output_width · 4 bytes when cmyk
  unsigned long rows_read;  // rows decoded (all of them when recovered)
  bool premature_end;
};

// ---- The phases that call libjpeg. No C++ objects with destructors in these frames. ----

int jpeg_phase_header(jpeg_decompress_struct* cinfo, JpegJob* job, int requested_channels) {
  auto* err = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (setjmp(err->jump)) return kPhaseError;
  if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK) return kPhaseSuspended;
  job->channels =
      requested_channels != 0 ? requested_channels : (cinfo->num_components < 3 ? cinfo->num_components : 3);
  if (job->channels == 1) {
    cinfo->out_color_space = JCS_GRAYSCALE;
  } else {
    job->cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    cinfo->out_color_space = job->cmyk ? JCS_CMYK : JCS_RGB;
  }
  cinfo->do_fancy_upsampling = job->fancy_upscaling ? TRUE : FALSE;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(job->ratio);
  cinfo->dct_method = job->dct_method;
  jpeg_calc_output_dimensions(cinfo);
  return kPhaseOk;
}

// TF's CMYK → RGB (jpeg_mem.cc): Adobe files store inverted CMYK.
void cmyk_to_rgb(const unsigned char* cmyk, unsigned char* rgb, unsigned long width, bool adobe) {
  for (unsigned long i = 0; i < width; ++i) {
    const int c = cmyk[4 * i], m = cmyk[4 * i + 1], y = cmyk[4 * i + 2], k = cmyk[4 * i + 3];
    if (adobe) {
      rgb[3 * i] = static_cast<unsigned char>(k * c / 255);
      rgb[3 * i + 1] = static_cast<unsigned char>(k * m / 255);
      rgb[3 * i + 2] = static_cast<unsigned char>(k * y / 255);
    } else {
      rgb[3 * i] = static_cast<unsigned char>((255 - k) * (255 - c) / 255);
      rgb[3 * i + 1] = static_cast<unsigned char>((255 - k) * (255 - m) / 255);
      rgb[3 * i + 2] = static_cast<unsigned char>((255 - k) * (255 - y) / 255);
    }
  }
}

int jpeg_phase_decode(jpeg_decompress_struct* cinfo, JpegJob* job) {
  auto* err = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (setjmp(err->jump)) return kPhaseError;
  if (!jpeg_start_decompress(cinfo)) return kPhaseSuspended;  // a multi-scan file cut short
  const unsigned long height = cinfo->output_height, width = cinfo->output_width;
  const std::size_t stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(job->channels);
  job->rows_read = height;
  while (cinfo->output_scanline < height) {
    unsigned char* line = job->out + static_cast<std::size_t>(cinfo->output_scanline) * stride;
    JSAMPROW row = job->cmyk ? job->cmyk_row : line;
    if (jpeg_read_scanlines(cinfo, &row, 1) == 1) {
      if (job->cmyk) cmyk_to_rgb(job->cmyk_row, line, width, cinfo->saw_Adobe_marker != 0);
      continue;
    }
    // The data ended (the source suspended): as TF, keep what was read, or with recovery repeat
    // the last row (black when there is none) down to the bottom.
    const unsigned long at = cinfo->output_scanline;
    if (!job->recover) {
      job->rows_read = at;
      job->premature_end = true;
      break;
    }
    for (unsigned long y = at; y < height; ++y) {
      unsigned char* dst = job->out + static_cast<std::size_t>(y) * stride;
      if (y == 0)
        std::memset(dst, 0, stride);
      else
        std::memcpy(dst, dst - stride, stride);
    }
    cinfo->output_scanline = height;  // lets jpeg_finish_decompress end cleanly, as TF does
    break;
  }
  if (job->premature_end)
    jpeg_abort(reinterpret_cast<j_common_ptr>(cinfo));
  else
    (void)jpeg_finish_decompress(cinfo);  // FALSE: the data after the last row is missing; as TF, fine
  return kPhaseOk;
}

// ---- C++ side. ----

struct JpegDecoder {
  jpeg_decompress_struct cinfo{};
  JpegErrors err{};
  bool created = false;
  JpegDecoder() = default;
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
  ~JpegDecoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

// jpeg_create_decompress can fail only by allocation (error_exit): its own setjmp frame.
bool jpeg_phase_create(jpeg_decompress_struct* cinfo, JpegErrors* err) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  return true;
}

J_DCT_METHOD parse_dct_method(const std::string& name) {
  if (name.empty() || name == "INTEGER_FAST") return JDCT_IFAST;  // TensorFlow's default
  if (name == "INTEGER_ACCURATE") return JDCT_ISLOW;
  throw InvalidArgumentError("decode_jpeg: dct_method must be one of {'', 'INTEGER_FAST', 'INTEGER_ACCURATE'}, got '" +
                             name + "'");
}

[[noreturn]] void throw_libjpeg_error(const std::string& subject, const JpegDecoder& d, const JpegSource& src) {
  const std::string at = chorus::internal::str_cat(" at byte ", source_offset(src), " of ", src.size, ": ");
  switch (d.err.code) {
    case JERR_CONVERSION_NOTIMPL:
      throw InvalidArgumentError("decode_jpeg: JPEG " + subject + " cannot be decoded to the channels asked for" + at +
                                 d.err.message);
    case JERR_IMAGE_TOO_BIG:
      throw ResourceExhaustedError(chorus::internal::str_cat("decode_jpeg: JPEG ", subject, " declares ",
                                                             d.cinfo.image_width, "x", d.cinfo.image_height,
                                                             " (width x height) pixels: ", d.err.message));
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
      throw ResourceExhaustedError(chorus::internal::str_cat(
          "decode_jpeg: JPEG ", subject, " needs more working memory than the ceiling (max_memory_to_use ",
          d.cinfo.mem->max_memory_to_use, " bytes, 2 * DecodeLimits::max_output_bytes + 64 MiB)", at, d.err.message));
    default: throw DataLossError("decode_jpeg: corrupt JPEG " + subject + at + d.err.message);
  }
}

[[noreturn]] void throw_truncated(const std::string& subject, const JpegDecoder& d, const JpegSource& src,
                                  const std::string& where) {
  throw DataLossError(chorus::internal::str_cat(
      "decode_jpeg: truncated JPEG ", subject, " at byte ", source_offset(src), " of ", src.size, ": the data ends ",
      where, d.err.last_warning[0] != '\0' ? " (" : "", d.err.last_warning, d.err.last_warning[0] != '\0' ? ")" : ""));
}

}  // namespace

Image decode_jpeg_values(std::string_view bytes, const DecodeJpegOptions& options, std::string_view what) {
  CHORUS_REQUIRE(options.channels == 0 || options.channels == 1 || options.channels == 3, InvalidArgumentError,
                 "decode_jpeg: channels must be 0, 1, or 3 for JPEG, got ", options.channels);
  CHORUS_REQUIRE(options.ratio == 1 || options.ratio == 2 || options.ratio == 4 || options.ratio == 8,
                 InvalidArgumentError, "decode_jpeg: ratio must be 1, 2, 4, or 8, got ", options.ratio);
  JpegJob job{};
  job.dct_method = parse_dct_method(options.dct_method);
  job.ratio = options.ratio;
  job.fancy_upscaling = options.fancy_upscaling;
  job.recover = options.try_recover_truncated;
  const std::string subject = internal::image_subject(what, bytes.size());
  if (bytes.empty()) throw DataLossError("decode_jpeg: JPEG " + subject + " is empty");
  // TF's decode_jpeg recognizes a JPEG by its first three bytes (SOI and a marker's 0xFF) before
  // libjpeg sees it, so data libjpeg would resynchronize on is refused, as there.
  if (bytes.size() < 3 || bytes.substr(0, 3) != std::string_view("\xff\xd8\xff", 3))
    throw DataLossError("decode_jpeg: " + subject + " is not a JPEG (it does not start with FF D8 FF, " +
                        "the SOI marker and the next marker)");

  JpegDecoder d;
  d.cinfo.err = jpeg_std_error(&d.err.pub);
  d.err.pub.error_exit = on_jpeg_error;
  d.err.pub.emit_message = on_jpeg_message;
  d.err.pub.output_message = on_jpeg_output;
  if (!jpeg_phase_create(&d.cinfo, &d.err))
    throw ResourceExhaustedError("decode_jpeg: libjpeg could not allocate its state");
  d.created = true;
  const std::int64_t limit = options.limits.max_output_bytes;
  d.cinfo.mem->max_memory_to_use = limit > (std::int64_t{1} << 40) ? 0 : static_cast<long>(2 * limit + (64 << 20));
  auto* src = static_cast<JpegSource*>(
      (*d.cinfo.mem->alloc_small)(reinterpret_cast<j_common_ptr>(&d.cinfo), JPOOL_PERMANENT, sizeof(JpegSource)));
  *src = JpegSource{};
  src->pub.init_source = source_init;
  src->pub.fill_input_buffer = source_fill;
  src->pub.skip_input_data = source_skip;
  src->pub.resync_to_restart = jpeg_resync_to_restart;
  src->pub.term_source = source_term;
  src->data = reinterpret_cast<const JOCTET*>(bytes.data());
  src->size = bytes.size();
  src->recover = options.try_recover_truncated;
  d.cinfo.src = &src->pub;

  const int header = jpeg_phase_header(&d.cinfo, &job, options.channels);
  if (header == kPhaseError) throw_libjpeg_error(subject, d, *src);
  if (header == kPhaseSuspended) throw_truncated(subject, d, *src, "inside the header");
  const std::int64_t height = d.cinfo.output_height, width = d.cinfo.output_width;
  internal::check_image_limits("decode_jpeg", subject, height, width, job.channels, 1, options.limits);

  Image image;
  image.height = height;
  image.width = width;
  image.channels = job.channels;
  image.dtype = ImageDType::kUInt8;
  image.u8.assign(static_cast<std::size_t>(image.num_values()), 0);
  std::vector<unsigned char> cmyk_row(job.cmyk ? static_cast<std::size_t>(width) * 4 : 0);
  job.out = image.u8.data();
  job.cmyk_row = cmyk_row.data();
  const int decoded = jpeg_phase_decode(&d.cinfo, &job);
  if (decoded == kPhaseError) throw_libjpeg_error(subject, d, *src);
  if (decoded == kPhaseSuspended) throw_truncated(subject, d, *src, "before the last scan of a progressive image");
  const int expect = job.cmyk ? 4 : job.channels;
  if (d.cinfo.output_components != expect)
    throw InternalError(chorus::internal::str_cat("decode_jpeg: libjpeg produced ", d.cinfo.output_components,
                                                  " components, expected ", expect, " for ", subject));
  if (job.premature_end) {
    // TF: rows_read / height against min(1, acceptable_fraction), in float.
    const float fraction = static_cast<float>(job.rows_read) / static_cast<float>(height);
    const float needed = options.acceptable_fraction < 1.0f ? options.acceptable_fraction : 1.0f;
    if (fraction < needed)
      throw_truncated(subject, d, *src,
                      chorus::internal::str_cat("after row ", job.rows_read, " of ", height, " (acceptable_fraction ",
                                                options.acceptable_fraction, ")"));
    // The rows not read stay zero (black), as TF leaves them.
  }
  return image;
}

Tensor decode_jpeg(std::string_view bytes, const DecodeJpegOptions& options, std::string_view what) {
  return image_to_tensor(decode_jpeg_values(bytes, options, what));
}

Tensor decode_jpeg(const Tensor& contents, const DecodeJpegOptions& options, std::string_view what) {
  return decode_jpeg(internal::scalar_contents("decode_jpeg", contents), options, what);
}

}  // namespace chorus::data
