// Writers that rename into place (core/file_io.h: replace_file, require_replaceable,
// temporary_name) and the timeline that uses them (issue 40, 1): a device node, a FIFO or a
// socket at the path is refused with its type named and left as it was; before, `CHORUS_TIMELINE=
// /dev/full` turned /dev/full into a 12 KB regular file (as root, /dev/null would have been
// replaced too). Temporaries get names nobody can predict.
#include <chorus/core/file_io.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>
#include <chorus/core/timeline.h>

namespace chorus::io {
namespace {

using chorus::testing::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// Expects replace_file to refuse `path` with FailedPreconditionError naming `type`, and the object
// there to be of the same kind afterwards (compared with lstat's st_mode file type).
void expect_refused_and_untouched(const TempDir& dir, const std::string& path, const std::string& type) {
  struct stat before {};
  ASSERT_EQ(::lstat(path.c_str(), &before), 0);
  try {
    replace_file(path, "a timeline or a checkpoint", /*durable=*/true);
    ADD_FAILURE() << "replace_file wrote over " << type << " at " << path;
  } catch (const FailedPreconditionError& e) {
    EXPECT_THAT(e.message(), HasSubstr(type));
    EXPECT_THAT(e.message(), HasSubstr(path));
  }
  struct stat after {};
  ASSERT_EQ(::lstat(path.c_str(), &after), 0);
  EXPECT_EQ(before.st_mode & S_IFMT, after.st_mode & S_IFMT) << path << " changed type";
  EXPECT_EQ(before.st_ino, after.st_ino) << path << " was replaced";
  EXPECT_EQ(dir.list().size(), 1u) << "a temporary was left behind";
}

TEST(ReplaceFileHostile, AFifoIsRefusedNamingItAndLeftAFifo) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  expect_refused_and_untouched(dir, dir / "fifo", "a FIFO");
}

TEST(ReplaceFileHostile, ACharacterDeviceIsRefusedAndLeftADevice) {
  TempDir dir;
  // The node of /dev/null (1, 3), made in a scratch directory: creating one needs CAP_MKNOD.
  if (::mknod((dir / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod of a character device needs root (CAP_MKNOD): " << std::strerror(errno);
  expect_refused_and_untouched(dir, dir / "null", "a character device");
}

TEST(ReplaceFileHostile, ASocketAndADirectoryAreRefused) {
  TempDir dir;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = dir / "s";
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  expect_refused_and_untouched(dir, sock, "a socket");
  ::close(fd);
  fs::remove(sock);
  fs::create_directory(dir / "d");
  expect_refused_and_untouched(dir, dir / "d", "a directory");
}

TEST(ReplaceFileHostile, ALinkIsReplacedItselfAndItsTargetNeverWritten) {
  TempDir dir;
  replace_file(dir / "victim", "mine");
  fs::create_symlink(dir / "victim", dir / "link");
  replace_file(dir / "link", "new");
  EXPECT_FALSE(fs::is_symlink(dir / "link"));
  EXPECT_EQ(fs::file_size(dir / "link"), 3u);
  EXPECT_EQ(fs::file_size(dir / "victim"), 4u);
}

TEST(ReplaceFileHostile, TemporaryNamesCannotBePredicted) {
  std::set<std::string> names;
  for (int i = 0; i < 64; ++i) names.insert(temporary_name("/d/f", ".tmp-"));
  EXPECT_EQ(names.size(), 64u);
  for (const std::string& n : names) {
    ASSERT_EQ(n.rfind("/d/f.tmp-", 0), 0u) << n;
    EXPECT_EQ(n.size(), std::string("/d/f.tmp-").size() + 16) << n;
  }
  // The old name, "<path>.tmp<pid>", planted as a link, no longer stops (or redirects) a write.
  TempDir dir;
  replace_file(dir / "victim", "mine");
  fs::create_symlink(dir / "victim", dir / ("f.tmp" + std::to_string(::getpid())));
  replace_file(dir / "f", "written");
  EXPECT_EQ(fs::file_size(dir / "f"), 7u);
  EXPECT_EQ(fs::file_size(dir / "victim"), 4u);
}

TEST(TimelineHostile, AFifoAsTheTracePathIsRefusedWhenTheRecordingStarts) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "trace.json").c_str(), 0600), 0);
  try {
    timeline::start(dir / "trace.json");
    timeline::stop();
    ADD_FAILURE() << "timeline::start accepted a FIFO";
  } catch (const FailedPreconditionError& e) {
    EXPECT_THAT(e.message(), HasSubstr("a FIFO"));
  }
  EXPECT_TRUE(fs::is_fifo(dir / "trace.json"));
  EXPECT_FALSE(timeline::enabled());
}

}  // namespace
}  // namespace chorus::io
