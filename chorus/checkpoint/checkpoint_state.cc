#include <chorus/checkpoint/checkpoint_state.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <chorus/checkpoint/atomic_file.h>
#include <chorus/checkpoint/bundle.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::train {

using ::chorus::internal::str_cat;

namespace {

constexpr const char* kStateFile = "checkpoint";

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c < 0x20 || c >= 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\%03o", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string join_dir(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  return (std::filesystem::path(dir) / path).string();
}

std::string relative_to(const std::string& dir, const std::string& path) {
  const std::filesystem::path d = std::filesystem::path(dir).lexically_normal();
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.parent_path() == d || (d == "." && !p.has_parent_path())) return p.filename().string();
  return path;
}

[[noreturn]] void malformed(const std::string& file, int line, const std::string& why) {
  throw DataLossError(str_cat("checkpoint state file '", file, "' line ", line, ": ", why));
}

std::string unquote(const std::string& v, const std::string& file, int line) {
  if (v.size() < 2 || (v.front() != '"' && v.front() != '\'') || v.back() != v.front()) {
    malformed(file, line, "expected a quoted string, got " + v);
  }
  std::string out;
  for (std::size_t i = 1; i + 1 < v.size(); ++i) {
    char c = v[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i + 1 > v.size() - 1) malformed(file, line, "a string ends in a backslash");
    c = v[i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '"':
      case '\'':
      case '\\': out += c; break;
      default:
        if (c >= '0' && c <= '7') {
          int value = 0, digits = 0;
          while (digits < 3 && i + 1 < v.size() && v[i] >= '0' && v[i] <= '7') {
            value = value * 8 + (v[i] - '0');
            ++i;
            ++digits;
          }
          --i;
          out += static_cast<char>(value);
        } else {
          malformed(file, line, std::string("unknown escape \\") + c);
        }
    }
  }
  return out;
}

// A decimal number as the text format writes it. Hexadecimal floats (which strtod would take) are
// refused, as protobuf's text parser refuses them. Underflow is not an error: strtod reports
// ERANGE for subnormals such as 4.9406564584124654e-324, which the writer itself produces
// (a state with a subnormal timestamp was written but could not be read back; libFuzzer found it).
// Overflow (±HUGE_VAL with ERANGE) is.
double parse_number(const std::string& v, const std::string& file, int line) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  const bool hex = v.find_first_of("xX") != std::string::npos;
  const bool overflow = errno == ERANGE && std::isinf(d);
  if (v.empty() || hex || end != v.c_str() + v.size() || overflow) malformed(file, line, "expected a number, got " + v);
  return d;
}

}  // namespace

std::string checkpoint_state_to_text(const CheckpointState& s) {
  std::string out = "model_checkpoint_path: " + quote(s.model_checkpoint_path) + "\n";
  for (const auto& p : s.all_model_checkpoint_paths) out += "all_model_checkpoint_paths: " + quote(p) + "\n";
  for (double t : s.all_model_checkpoint_timestamps)
    out += "all_model_checkpoint_timestamps: " + format_double(t) + "\n";
  out += "last_preserved_timestamp: " + format_double(s.last_preserved_timestamp) + "\n";
  return out;
}

CheckpointState parse_checkpoint_state(const std::string& text, const std::string& file) {
  CheckpointState s;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const auto first = raw.find_first_not_of(" \t\r");
    if (first == std::string::npos || raw[first] == '#') continue;
    const auto colon = raw.find(':', first);
    if (colon == std::string::npos) malformed(file, line, "expected 'field: value', got '" + raw + "'");
    const std::string field = raw.substr(first, raw.find_last_not_of(" \t", colon - 1) - first + 1);
    const auto vstart = raw.find_first_not_of(" \t", colon + 1);
    const auto vend = raw.find_last_not_of(" \t\r");
    const std::string value = vstart == std::string::npos ? "" : raw.substr(vstart, vend - vstart + 1);
    if (field == "model_checkpoint_path")
      s.model_checkpoint_path = unquote(value, file, line);
    else if (field == "all_model_checkpoint_paths")
      s.all_model_checkpoint_paths.push_back(unquote(value, file, line));
    else if (field == "all_model_checkpoint_timestamps")
      s.all_model_checkpoint_timestamps.push_back(parse_number(value, file, line));
    else if (field == "last_preserved_timestamp")
      s.last_preserved_timestamp = parse_number(value, file, line);
    else
      CHORUS_LOG(WARNING) << "checkpoint state file '" << file << "' line " << line << ": unknown field '" << field
                          << "' ignored";
  }
  return s;
}

// TF's state files list a few paths; even 100,000 checkpoints stay far below this.
constexpr std::uint64_t kMaxStateFileBytes = 16 << 20;

std::optional<CheckpointState> read_checkpoint_state(const std::string& directory) {
  const std::string file = (std::filesystem::path(directory) / kStateFile).string();
  std::string text;
  try {
    text = read_file(file, kMaxStateFileBytes);
  } catch (const NotFoundError&) {
    return std::nullopt;
  }
  CheckpointState s = parse_checkpoint_state(text, file);
  s.model_checkpoint_path = join_dir(directory, s.model_checkpoint_path);
  for (auto& p : s.all_model_checkpoint_paths) p = join_dir(directory, p);
  return s;
}

void write_checkpoint_state(const std::string& directory, const CheckpointState& state) {
  CheckpointState rel = state;
  rel.model_checkpoint_path = relative_to(directory, state.model_checkpoint_path);
  for (auto& p : rel.all_model_checkpoint_paths) p = relative_to(directory, p);
  write_file_atomically((std::filesystem::path(directory) / kStateFile).string(), checkpoint_state_to_text(rel));
}

std::optional<std::string> latest_checkpoint(const std::string& directory) {
  const auto state = read_checkpoint_state(directory);
  if (!state || state->model_checkpoint_path.empty()) return std::nullopt;
  if (bundle_exists(state->model_checkpoint_path)) return state->model_checkpoint_path;
  CHORUS_LOG(WARNING) << "Couldn't match files for checkpoint " << state->model_checkpoint_path;
  return std::nullopt;
}

}  // namespace chorus::train
