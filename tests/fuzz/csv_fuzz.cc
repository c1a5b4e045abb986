// libFuzzer target: CSV records as csv_dataset parses them (data/io/csv_internal.h's
// CsvRecordReader and TF 2.21's number parsing), on bytes in memory.
//
// Input: byte 0 picks the options (delimiter ',' ';' '\t' '|', use_quote_delim, header, na_value
// "NA" or ""), byte 1 the columns (1..4 of int32, int64, float32, float64, string, each required or
// with a default), byte 2 select_cols / exclude_cols; the rest is the file.
// Contract: a bad record is an InvalidArgumentError (parse_csv returns its message); nothing else
// may be thrown but ResourceExhaustedError (max_record_bytes = 4 KiB). Oracles:
//   - a 1-byte and a 64 KiB buffer give the same records and errors;
//   - every record re-serializes (ints in decimal, floats with %.9g / %.17g, strings quoted with
//     "" escapes, or bare when quotes are off and they hold no delimiter or line break) to one line
//     that parses back to the same values (floats bit for bit, NaN as NaN).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/data/io/csv_internal.h>

using chorus::fuzz::check;
namespace internal = chorus::data::internal;
using chorus::data::CsvValue;
using internal::CsvKind;

namespace {

std::string show(const std::vector<internal::CsvResult>& rs);

bool same(const CsvValue& a, const CsvValue& b) {
  if (a.index() != b.index()) return false;
  if (const float* x = std::get_if<float>(&a)) {
    const float y = std::get<float>(b);
    return (std::isnan(*x) && std::isnan(y)) || std::memcmp(x, &y, sizeof y) == 0;
  }
  if (const double* x = std::get_if<double>(&a)) {
    const double y = std::get<double>(b);
    return (std::isnan(*x) && std::isnan(y)) || std::memcmp(x, &y, sizeof y) == 0;
  }
  return a == b;
}

// One field's text, or nullopt when the value cannot be written back unambiguously.
std::optional<std::string> serialize(const CsvValue& v, const internal::CsvSpec& s) {
  char buf[64];
  switch (v.index()) {
    case 0: return std::to_string(std::get<std::int32_t>(v));
    case 1: return std::to_string(std::get<std::int64_t>(v));
    case 2: std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(std::get<float>(v))); return std::string(buf);
    case 3: std::snprintf(buf, sizeof buf, "%.17g", std::get<double>(v)); return std::string(buf);
    default: break;
  }
  const std::string& str = std::get<std::string>(v);
  if (s.use_quote_delim) {
    std::string out = "\"";
    for (char c : str) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
  }
  if (str.find_first_of(std::string("\n\r") + s.delim) != std::string::npos) return std::nullopt;
  return str;
}

void check_reserializes(const std::vector<CsvValue>& row, const internal::CsvSpec& spec) {
  internal::CsvSpec again = spec;
  again.select_cols.clear();
  again.exclude_cols.clear();
  std::string line;
  for (std::size_t i = 0; i < row.size(); ++i) {
    const auto text = serialize(row[i], spec);
    if (!text) return;
    line += (i ? std::string(1, spec.delim) : std::string()) + *text;
  }
  // A lone empty string field would be an empty line: quoted, it is not (and without quotes it is
  // one empty field, which is what it was).
  const auto back = internal::parse_csv(line + "\n", again);
  check(back.size() == 1 && back[0].index() == 0, "a re-serialized record parses");
  const auto& row2 = std::get<0>(back[0]);
  check(row2.size() == row.size(), "a re-serialized record has as many fields");
  for (std::size_t i = 0; i < row.size(); ++i)
    check(same(row[i], row2[i]), "a re-serialized field parses to its value");
}

std::string show(const std::vector<internal::CsvResult>& rs) {
  std::string out;
  for (const auto& r : rs) {
    if (r.index() == 1) {
      out += "E" + std::get<1>(r) + "\n";
      continue;
    }
    for (const auto& v : std::get<0>(r)) {
      std::visit(
          [&](const auto& x) {
            if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>)
              out += "s" + x;
            else
              out += std::string(reinterpret_cast<const char*>(&x), sizeof x);
          },
          v);
      out += '\x1f';
    }
    out += '\n';
  }
  return out;
}

internal::CsvSpec spec_from(std::uint8_t opt, std::uint8_t cols, std::uint8_t sel) {
  internal::CsvSpec s;
  s.delim = ",;\t|"[opt & 3];
  s.use_quote_delim = (opt & 4) == 0;
  s.na_value = (opt & 16) ? "NA" : "";
  s.max_record_bytes = 4096;
  const int n = 1 + (cols & 3);
  for (int i = 0; i < n; ++i) {
    const int pick = ((cols >> 2) + 3 * i) % 5;
    const auto k = static_cast<CsvKind>(pick);
    s.kinds.push_back(k);
    const bool has_default = (cols >> (4 + i)) & 1;
    if (!has_default) {
      s.defaults.emplace_back();
      continue;
    }
    static const CsvValue kDefaults[] = {std::int32_t{7}, std::int64_t{-8}, 0.5f, -0.25, std::string("d")};
    s.defaults.emplace_back(kDefaults[pick]);
  }
  if (sel & 1) {  // select n increasing columns from 0..7
    for (std::int64_t c = 0, picked = 0; picked < n; ++c)
      if (((sel >> 1) >> (c % 7)) & 1 || 8 - c <= n - picked) s.select_cols.push_back(c), ++picked;
  } else if (sel & 2) {
    for (std::int64_t c = 0; c < 6; ++c)
      if ((sel >> (2 + c)) & 1) s.exclude_cols.push_back(c);
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const internal::CsvSpec spec = spec_from(data[0], data[1], data[2]);
  const bool header = (data[0] & 8) != 0;
  const std::string_view text = chorus::fuzz::as_view(data + 3, size - 3);
  std::vector<internal::CsvResult> a, b;
  bool a_big = false, b_big = false;
  try {
    a = internal::parse_csv(text, spec, header, 1 << 16);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::ResourceExhaustedError>(e);
    a_big = true;
  }
  try {
    b = internal::parse_csv(text, spec, header, 1);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::ResourceExhaustedError>(e);
    b_big = true;
  }
  check(a_big == b_big, "the buffer size does not change a ceiling failure");
  if (a_big) return 0;
  check(show(a) == show(b), "the buffer size changes no record");
  for (const auto& r : a)
    if (r.index() == 0) check_reserializes(std::get<0>(r), spec);
  return 0;
}
