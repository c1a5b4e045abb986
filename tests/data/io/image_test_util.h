// Helpers of the image codec tests: runs tests/data/io/image_cases.py (TensorFlow writes the files
// and decodes each), then decodes every case with chorus and compares (shape and a position-weighted hash of
// the output bytes, or the error).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/data/data_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/image_decode.h>
#include <chorus/data/io/jpeg.h>
#include <chorus/data/io/png.h>

namespace chorus::data::testing {

// image_cases.py's weighted_hash: sum of byte_i * (2i + 1) mod 2^64, xor n * 0x9E3779B97F4A7C15.
inline std::uint64_t weighted_hash(const void* data, std::size_t n) {
  std::uint64_t s = 0;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) s += std::uint64_t{p[i]} * (2 * std::uint64_t{i} + 1);
  return s ^ (std::uint64_t{n} * 0x9E3779B97F4A7C15ULL);
}

inline std::uint64_t image_hash(const Image& im) {
  switch (im.dtype) {
    case ImageDType::kUInt8: return weighted_hash(im.u8.data(), im.u8.size());
    case ImageDType::kUInt16: return weighted_hash(im.u16.data(), im.u16.size() * 2);  // little-endian host
    case ImageDType::kFloat32: return weighted_hash(im.f32.data(), im.f32.size() * 4);
  }
  return 0;
}

struct ImageCase {
  std::string op, file, dtype, opts, status;
  int channels = 0;
  std::int64_t h = 0, w = 0, c = 0;
  std::uint64_t hash = 0;
};

inline ImageDType parse_image_dtype(const std::string& s) {
  return s == "uint8" ? ImageDType::kUInt8 : s == "uint16" ? ImageDType::kUInt16 : ImageDType::kFloat32;
}

// Runs image_cases.py <dir> <kind>; returns the manifest's cases (empty after a FAIL/skip).
inline std::vector<ImageCase> tf_image_cases(const std::string& python, const std::string& dir,
                                             const std::string& kind) {
  const std::string cmd =
      "'" + python + "' '" CHORUS_SOURCE_ROOT "/tests/data/io/image_cases.py' '" + dir + "' " + kind;
  EXPECT_EQ(chorus::testing::run_interop_command(cmd, "tf"), 0) << cmd;
  std::vector<ImageCase> cases;
  std::ifstream in(dir + "/manifest.txt");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::istringstream s(line);
    ImageCase k;
    std::string hash;
    s >> k.op >> k.file >> k.channels >> k.dtype >> k.opts >> k.status >> k.h >> k.w >> k.c >> hash;
    k.hash = std::stoull(hash, nullptr, 16);
    cases.push_back(k);
  }
  return cases;
}

inline DecodeJpegOptions jpeg_options(const ImageCase& k) {
  DecodeJpegOptions o{.channels = k.channels};
  std::istringstream s(k.opts == "-" ? "" : k.opts);
  for (std::string kv; std::getline(s, kv, ',');) {
    const std::string key = kv.substr(0, kv.find('=')), value = kv.substr(kv.find('=') + 1);
    if (key == "ratio") o.ratio = std::stoi(value);
    if (key == "fancy") o.fancy_upscaling = value == "1";
    if (key == "dct") o.dct_method = value;
    if (key == "recover") o.try_recover_truncated = value == "1";
    if (key == "fraction") o.acceptable_fraction = std::stof(value);
  }
  return o;
}

inline Image decode_case(const ImageCase& k, const std::string& bytes) {
  const ImageDType dt = parse_image_dtype(k.dtype);
  if (k.op == "decode_png") return decode_png_values(bytes, {.channels = k.channels, .dtype = dt}, k.file);
  if (k.op == "decode_jpeg") return decode_jpeg_values(bytes, jpeg_options(k), k.file);
  return decode_image_values(bytes, {.channels = k.channels, .dtype = dt}, k.file);
}

// Decodes every case; returns how many agreed with TF. Mismatches are reported (up to 20).
inline int check_cases(const std::vector<ImageCase>& cases, const std::string& dir) {
  int agreed = 0, reported = 0;
  for (const ImageCase& k : cases) {
    const std::string bytes = slurp(dir + "/" + k.file);
    std::string got;
    try {
      const Image im = decode_case(k, bytes);
      // try_recover_truncated: shape and success only. TF 2.21's source manager, asked for bytes
      // past the cut, hands libjpeg back its stale position (it returns TRUE with nothing new), so
      // the rows TF "recovers" re-decode earlier data; chorus feeds one fake EOI (what TF means to
      // do), and libjpeg fills the rest as for any short file. jpeg.h says so.
      const bool shape_only = k.opts.find("recover=1") != std::string::npos;
      if (k.status == "ok" && im.height == k.h && im.width == k.w && im.channels == k.c &&
          (shape_only || image_hash(im) == k.hash)) {
        ++agreed;
        continue;
      }
      if (shape_only && k.status == "error") {  // chorus recovers a cut TF's loop gives up on
        ++agreed;
        continue;
      }
      got = chorus::internal::str_cat("decoded ", im.height, "x", im.width, "x", im.channels, " hash ", std::hex,
                                      image_hash(im));
    } catch (const ResourceExhaustedError& e) {
      // A corrupted header declaring more than libpng/libjpeg decode: TF's InvalidArgument.
      if (k.status == "error") {
        ++agreed;
        continue;
      }
      got = e.what();
    } catch (const DataLossError& e) {
      if (k.status == "error") {
        ++agreed;
        continue;
      }
      got = e.what();
    } catch (const InvalidArgumentError& e) {
      // TF's errors are all InvalidArgument; chorus's is too only for a conversion libjpeg refuses
      // (a CMYK file asked for gray), else DataLoss.
      if (k.status == "error" && std::string(e.what()).find("channels asked for") != std::string::npos) {
        ++agreed;
        continue;
      }
      got = e.what();
    } catch (const Error& e) {
      got = e.what();
    }
    if (reported++ < 20)
      ADD_FAILURE() << k.op << " " << k.file << " channels " << k.channels << " " << k.dtype << " " << k.opts << ": TF "
                    << k.status << " " << k.h << "x" << k.w << "x" << k.c << " hash " << std::hex << k.hash
                    << ", chorus " << got;
  }
  return agreed;
}

}  // namespace chorus::data::testing
