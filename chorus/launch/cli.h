// The flags every chorus program answers, as Unix tools do (issue 23 item 4):
//   --help, -h   the program's usage on stdout, exit status 0
//   --version    chorus's version, the git commit and build type it was built from, and the
//                libraries it was built with and loads (launch/build_info.h), on stdout, exit 0
// and an unknown flag is exit status 2 with "<program>: unknown flag '<flag>'" and the usage on
// stderr (usage_error). chorus-run and chorus-train parse their own command lines (they take
// --help and --version there); the examples, chorus-devices and the benches use these helpers:
//
//   int main(int argc, char** argv) {
//     if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_ops", kUsage)) return *rc;
//     for (int i = 1; i < argc; ++i) {
//       if (...) ...;
//       else return chorus::launch::usage_error("bench_ops", argv[i], kUsage);
//     }
//
// Thread-safe (they only print); nothing throws.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace chorus::launch {

struct VersionInfo {
  std::string version;     // the project's version (CMake's project(chorus VERSION ...)), "0.1.0"
  std::string commit;      // `git describe --always --dirty` at configure time; "unknown" outside git
  std::string build_type;  // CMAKE_BUILD_TYPE, "" when none was given
};
VersionInfo version_info();

// "<program> (chorus <version>, commit <commit>, <build type> build)" and then one line per
// component of query_build_info(), indented.
std::string version_text(std::string_view program);

// When argv holds --help / -h or --version (before any "--"): prints the usage or the version
// text to stdout and returns 0; otherwise nullopt.
std::optional<int> answer_help_or_version(int argc, char** argv, std::string_view program, std::string_view usage);

// Prints "<program>: unknown flag '<flag>'" and the usage to stderr; returns 2.
int usage_error(std::string_view program, std::string_view flag, std::string_view usage);

// Prints "<program>: <message>\n" and then `more` (each line of it ended by '\n') to stderr in
// one write(2), so that the lines of several ranks of an mpirun job, which share one stderr, never
// interleave within a line (std::cerr << a << b writes each part on its own: two ranks failing at
// once printed "chorus-train: chorus-train: <message>" and a bare "<message>"; issue 40).
void print_error(std::string_view program, std::string_view message, std::string_view more = "");

}  // namespace chorus::launch
