#include <chorus/core/file_io.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include <chorus/core/error.h>

namespace chorus::io {

void throw_errno(int err, std::string_view action, const std::string& path) {
  const std::string msg =
      chorus::internal::str_cat(action, " '", path, "': ", std::strerror(err), " (errno ", err, ")");
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS: throw PermissionDeniedError(msg);
    case ENOENT:
    case ENODEV:
    case ENXIO: throw NotFoundError(msg);
    case EEXIST: throw AlreadyExistsError(msg);
    case ENOTDIR:
    case EISDIR:
    case EBUSY:
    case ENOTEMPTY: throw FailedPreconditionError(msg);
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EFBIG: throw ResourceExhaustedError(msg);
    case ENAMETOOLONG:
    case EINVAL:
    case ELOOP: throw InvalidArgumentError(msg);
    default: throw UnknownError(msg);
  }
}

void create_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_errno(ec.value(), "cannot create log directory", dir);
  // create_directories succeeds silently when `dir` exists; it must also be a directory.
  if (!std::filesystem::is_directory(dir, ec)) throw_errno(ENOTDIR, "cannot use log directory", dir);
}

namespace {

const char* type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

int open_retrying(const std::string& path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Files are opened O_NONBLOCK only so that a FIFO cannot block the open; reads and writes block.
void make_blocking(int fd, const std::string& path) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw_errno(errno, "cannot set blocking mode on", path);
}

}  // namespace

std::string describe_file_type(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "missing";
  return type_name(st.st_mode);
}

File File::create_new(const std::string& path) {
  const int fd = open_retrying(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) throw_errno(errno, "cannot create file", path);
  return File(fd, path);
}

File File::open_for_read(const std::string& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever.
  const int fd = open_retrying(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw_errno(errno, "cannot open", path);
  File f(fd, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    throw InvalidArgumentError(chorus::internal::str_cat("'", path, "' is ", type_name(st.st_mode),
                                                         ", not a regular file: give the path of a file"));
  }
  make_blocking(fd, path);
  return f;
}

File File::open_or_create_owned(const std::string& path) {
  const int fd = open_retrying(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int err = errno;
    // ELOOP: the last component is a symbolic link, which O_NOFOLLOW refuses to open.
    if (err == ELOOP || err == ENXIO || err == EISDIR) {
      throw FailedPreconditionError(chorus::internal::str_cat(
          "'", path, "' is ", describe_file_type(path),
          "; chorus creates this file itself and never follows a link or writes into something it did not make: "
          "remove it, or use another directory"));
    }
    throw_errno(err, "cannot open", path);
  }
  File f(fd, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    throw FailedPreconditionError(
        chorus::internal::str_cat("'", path, "' is ", type_name(st.st_mode),
                                  ", not a regular file chorus made: remove it, or use another directory"));
  }
  if (st.st_uid != ::geteuid()) {
    throw FailedPreconditionError(chorus::internal::str_cat(
        "'", path, "' belongs to user id ", st.st_uid, ", not to this process's user (", ::geteuid(),
        "): chorus writes only files it owns; remove it, or use another directory"));
  }
  make_blocking(fd, path);
  return f;
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

void require_replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw_errno(errno, "cannot inspect", path);
  }
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return;
  throw FailedPreconditionError(chorus::internal::str_cat(
      "'", path, "' is ", type_name(st.st_mode),
      ", not a regular file: chorus writes a file by renaming a new one over the path, which would replace it; "
      "give the path of a regular file (or of one that does not exist yet)"));
}

std::string temporary_name(const std::string& path, std::string_view tag) {
  // random_device per call: no shared generator state between threads, and distinct across
  // processes writing into one directory.
  std::random_device rd;
  const std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  return chorus::internal::str_cat(path, tag, hex);
}

void replace_file(const std::string& path, std::string_view bytes, bool durable, const std::string& temporary) {
  require_replaceable(path);  // before the temporary exists: nothing to clean up when refused
  const std::string tmp = temporary.empty() ? temporary_name(path, ".tmp-") : temporary;
  File f = File::create_new(tmp);  // before the try: a temporary that exists is not ours to remove
  try {
    f.write_all(bytes);
    if (durable) f.sync();
    f.close();
    require_replaceable(path);  // again, right before the rename: it may have changed meanwhile
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno(errno, "cannot rename to '" + path + "' from", tmp);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace chorus::io
