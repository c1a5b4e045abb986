#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace chorus::io {

void throw_errno(int err, std::string_view action, const std::string& path) {
  const std::string msg = chorus::internal::str_cat(action, " '", path, "': ", std::strerror(err), " (errno ", err, ")");
  switch (err) {
    case EACCES: case EPERM: case EROFS: throw PermissionDeniedError(msg);
    case ENOENT: case ENODEV: case ENXIO: throw NotFoundError(msg);
    case EEXIST: throw AlreadyExistsError(msg);
    case ENOTDIR: case EISDIR: case EBUSY: case ENOTEMPTY: throw FailedPreconditionError(msg);
    case ENOSPC: case EDQUOT: case EMFILE: case ENFILE: case ENOMEM: case EFBIG: throw ResourceExhaustedError(msg);
    case ENAMETOOLONG: case EINVAL: case ELOOP: throw InvalidArgumentError(msg);
    default: throw UnknownError(msg);
  }
}

void create_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_errno(ec.value(), "cannot create log directory", dir);
  // create_directories succeeds silently when `dir` exists; it must also be a directory.
  if (!std::filesystem::is_directory(dir, ec))
    throw_errno(ENOTDIR, "cannot use log directory", dir);
}

File File::create_new(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno(errno, "cannot create file", path);
  return File(fd, path);
}

File File::open_for_read(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno(errno, "cannot open", path);
  return File(fd, path);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File::File(File&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

void File::write_all(std::string_view data) {
  CHORUS_REQUIRE(fd_ >= 0, FailedPreconditionError, "write to closed file '", path_, "'");
  while (!data.empty()) {
    const ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "cannot write", path_);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::size_t File::read(void* buf, std::size_t n) {
  CHORUS_REQUIRE(fd_ >= 0, FailedPreconditionError, "read from closed file '", path_, "'");
  auto* p = static_cast<char*>(buf);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "cannot read", path_);
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

std::size_t File::read_at(std::uint64_t offset, void* buf, std::size_t n) const {
  CHORUS_REQUIRE(fd_ >= 0, FailedPreconditionError, "read from closed file '", path_, "'");
  auto* p = static_cast<char*>(buf);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd_, p + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "cannot read", path_);
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

void File::seek(std::uint64_t offset) {
  CHORUS_REQUIRE(fd_ >= 0, FailedPreconditionError, "seek in closed file '", path_, "'");
  if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) throw_errno(errno, "cannot seek in", path_);
}

std::uint64_t File::size() const {
  CHORUS_REQUIRE(fd_ >= 0, FailedPreconditionError, "size of closed file '", path_, "'");
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_errno(errno, "cannot stat", path_);
  return static_cast<std::uint64_t>(st.st_size);
}

void File::sync() {
  CHORUS_REQUIRE(fd_ >= 0, FailedPreconditionError, "sync of closed file '", path_, "'");
  // EINVAL: the file is on something that cannot sync (a pipe, some special files): nothing to do.
  if (::fsync(fd_) != 0 && errno != EINVAL) throw_errno(errno, "cannot sync", path_);
}

void File::close() {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR) throw_errno(errno, "cannot close", path_);
}

}  // namespace chorus::io
