// Helpers shared by tests/summary/: a fresh temporary directory per test, whole-file I/O, and
// where the TF-written reference files live.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "tests/core/test_util.h"

namespace chorus::summary::testing {

namespace fs = std::filesystem;

using TempDir = chorus::testing::TempDir;  // tests/core/test_util.h

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// ../shared/testdata/tensorflow relative to the repository (CHORUS_SOURCE_ROOT, tests/CMakeLists.txt),
// or $CHORUS_TF_TESTDATA. nullopt when absent.
inline std::optional<std::string> tf_testdata_dir() {
  if (const char* env = std::getenv("CHORUS_TF_TESTDATA")) return std::string(env);
  const fs::path repo = CHORUS_SOURCE_ROOT;
  for (const fs::path& candidate :
       {repo.parent_path() / "shared" / "testdata" / "tensorflow", repo / "shared" / "testdata" / "tensorflow"}) {
    std::error_code ec;
    if (fs::is_directory(candidate, ec)) return candidate.string();
  }
  return std::nullopt;
}

}  // namespace chorus::summary::testing

// Skips the test (with the reason) when the TF-written files are not reachable.
#define CHORUS_TF_TESTDATA_OR_SKIP(var)                                                       \
  const std::optional<std::string> var##_opt = ::chorus::summary::testing::tf_testdata_dir(); \
  if (!var##_opt)                                                                             \
    GTEST_SKIP() << "TF-written test files not found (../shared/testdata/tensorflow; "        \
                    "set CHORUS_TF_TESTDATA)";                                                \
  const std::string var = *var##_opt
