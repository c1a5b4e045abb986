// Shared by the text and CSV reader tests (tests/data/io): compressed files written by zlib itself
// (an independent writer), reading a file through the readers' byte input, and running a read that
// must end within a time limit.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/core/error.h>
#include <chorus/data/io/text_file_internal.h>
#include <chorus/data/io/text_line_internal.h>

namespace chorus::data::testing {

// The process's peak resident set in KiB (getrusage), for the bombs' memory bounds.
inline std::int64_t max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// The factor on those bounds: under AddressSanitizer freed blocks stay resident in its quarantine
// (and every block carries redzones), so the peak measures ASan as much as the reader.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr std::int64_t kRssBoundScale = 4;
#else
inline constexpr std::int64_t kRssBoundScale = 1;
#endif

// `bytes` deflated by zlib as one gzip member (gzip = true) or a zlib stream.
inline std::string deflate_bytes(const std::string& bytes, bool gzip, int level = 6) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, level, Z_DEFLATED, gzip ? 31 : 15, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Every line of the file, through TextFileSource + LineReader (what text_line_dataset reads with).
inline std::vector<std::string> read_file_lines(const std::string& path, internal::TextCompression c,
                                                std::uint64_t max_line_bytes = 1 << 20,
                                                std::uint64_t max_inflated_bytes = std::uint64_t{1} << 32,
                                                std::vector<std::string>* partial = nullptr) {
  internal::BufferedInput in(std::make_unique<internal::TextFileSource>(path, c, max_inflated_bytes), 1 << 16);
  internal::LineReader reader(in, max_line_bytes);
  std::vector<std::string> out;
  for (std::string line; reader.next(&line);) {
    out.push_back(line);
    if (partial) partial->push_back(line);
  }
  return out;
}

// Runs f on another thread; fails the test (and ends the process rather than hang the suite) when
// it takes longer than `seconds`. Returns the chorus::Error it threw: "<class>: <message>", or
// "no error".
template <typename F>
std::string error_within(int seconds, F f) {
  auto fut = std::async(std::launch::async, [f]() -> std::string {
    try {
      f();
    } catch (const InvalidArgumentError& e) {
      return std::string("InvalidArgumentError: ") + e.what();
    } catch (const DataLossError& e) {
      return std::string("DataLossError: ") + e.what();
    } catch (const ResourceExhaustedError& e) {
      return std::string("ResourceExhaustedError: ") + e.what();
    } catch (const NotFoundError& e) {
      return std::string("NotFoundError: ") + e.what();
    } catch (const std::exception& e) {
      return std::string("other: ") + e.what();
    }
    return "no error";
  });
  if (fut.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked for " << seconds << " s";
    std::_Exit(1);
  }
  return fut.get();
}

}  // namespace chorus::data::testing

namespace chorus::data::testing {

inline std::string to_hex(std::string_view bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}
inline std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

// One case of csv_interop.py's output: its CASE line split into words, and TF's token lines.
struct InteropCase {
  std::vector<std::string> words;  // "CASE", name, file, compression, ...
  std::vector<std::string> tokens;
};
inline std::vector<InteropCase> read_interop_output(const std::string& path) {
  std::ifstream in(path);
  std::vector<InteropCase> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CASE ", 0) == 0) {
      InteropCase c;
      std::string w;
      for (std::size_t i = 0; i <= line.size(); ++i) {
        if (i == line.size() || line[i] == ' ') {
          c.words.push_back(w);
          w.clear();
        } else {
          w += line[i];
        }
      }
      out.push_back(c);
    } else if (line != "END" && !out.empty()) {
      out.back().tokens.push_back(line);
    }
  }
  return out;
}

// The interop script's error token for a chorus error ("E <TF class name>").
inline std::string error_token(const chorus::Error& e) {
  if (dynamic_cast<const InvalidArgumentError*>(&e)) return "E InvalidArgumentError";
  if (dynamic_cast<const DataLossError*>(&e)) return "E DataLossError";
  if (dynamic_cast<const ResourceExhaustedError*>(&e)) return "E ResourceExhaustedError";
  if (dynamic_cast<const NotFoundError*>(&e)) return "E NotFoundError";
  return std::string("E other: ") + e.what();
}

}  // namespace chorus::data::testing
