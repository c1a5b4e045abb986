// io::replace_file (core/file_io.h): the whole new file or the old one, never through a planted
// link, and no temporary left behind when it fails.
#include <chorus/core/file_io.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>

namespace chorus::io {
namespace {

using chorus::testing::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ReplaceFile, WritesThenReplacesLeavingNoTemporary) {
  TempDir dir;
  replace_file(dir / "f", "first");
  EXPECT_EQ(slurp(dir / "f"), "first");
  replace_file(dir / "f", "second, longer", /*durable=*/true);
  EXPECT_EQ(slurp(dir / "f"), "second, longer");
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"f"}));
}

TEST(ReplaceFile, APlantedLinkAtTheTemporaryIsRefusedAndItsTargetUntouched) {
  TempDir dir;
  replace_file(dir / "victim", "mine");
  const std::string tmp = dir / "f.tmp-planted";  // a caller's own temporary name, planted first
  std::filesystem::create_symlink(dir / "victim", tmp);
  EXPECT_THROW(replace_file(dir / "f", "evil", /*durable=*/false, tmp), Error);
  EXPECT_EQ(slurp(dir / "victim"), "mine");
  EXPECT_TRUE(std::filesystem::is_symlink(tmp));  // not ours: left alone
  EXPECT_FALSE(std::filesystem::exists(dir / "f"));
}

TEST(ReplaceFile, AFailedRenameRemovesTheTemporary) {
  TempDir dir;
  std::filesystem::create_directory(dir / "d");
  std::filesystem::create_directory(dir / "d/inside");  // a non-empty directory: rename fails
  EXPECT_THROW(replace_file(dir / "d", "x"), Error);
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"d"}));
}

}  // namespace
}  // namespace chorus::io
