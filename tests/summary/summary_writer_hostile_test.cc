// An event file's name cannot be planted in advance (issue 40, smaller things): before, the last
// field was the process's writer count (1 for the first writer), so anyone able to create files in
// the log directory could create events.out.tfevents.<second>.<host>.<pid>.1.v2 for the coming
// seconds and the writer failed with ALREADY_EXISTS: no logs.
#include <chorus/summary/summary_writer.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <set>

#include "tests/summary/summary_test_util.h"
#include <chorus/core/host.h>

namespace chorus::summary {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

TEST(SummaryWriterHostile, FilesPlantedAtThePredictableNamesDoNotDenyTheLogs) {
  TempDir dir;
  const std::string host = host_name_or("localhost");
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  for (std::int64_t s = now - 1; s <= now + 5; ++s)
    for (std::int64_t n = 1; n <= 4; ++n) testing::write_file(dir / event_file_name(s, host, ::getpid(), n), "x");
  const std::size_t planted = dir.list().size();
  SummaryWriter first(dir.path());
  SummaryWriter second(dir.path());
  EXPECT_EQ(dir.list().size(), planted + 2);
  EXPECT_NE(first.path(), second.path());
  EXPECT_GT(fs::file_size(first.path()), 1u);  // its own header, not a planted file
  // Creation order is kept: the second writer's number is the larger.
  auto number = [](const std::string& path) {
    const std::string base = fs::path(path).filename().string();
    const std::string no_suffix = base.substr(0, base.size() - 3);  // ".v2"
    return std::stoll(no_suffix.substr(no_suffix.rfind('.') + 1));
  };
  EXPECT_LT(number(first.path()), number(second.path()));
}

}  // namespace
}  // namespace chorus::summary
