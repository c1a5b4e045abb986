// POSIX files for the modules that write files (summary/, checkpoint/): a file descriptor with RAII,
// and the mapping from errno to chorus's TF error classes (TF's tsl/platform/errors.cc ErrnoToCode).
//
// Every call into the OS goes through here and, on failure, throws the typed error with the OS's
// own message, the action and the path: "PermissionDeniedError: cannot create directory
// '/x/logs': Permission denied (errno 13)". Not thread-safe (except read_at): one owner per File.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::io {

// Throws the chorus error class TF uses for `err`:
//   EACCES, EPERM, EROFS                  → PermissionDeniedError
//   ENOENT, ENODEV, ENXIO                 → NotFoundError
//   EEXIST                                → AlreadyExistsError
//   ENOTDIR, EISDIR, EBUSY, ENOTEMPTY     → FailedPreconditionError
//   ENOSPC, EDQUOT, EMFILE, ENFILE, ENOMEM, EFBIG → ResourceExhaustedError
//   ENAMETOOLONG, EINVAL, ELOOP           → InvalidArgumentError
//   anything else                         → UnknownError
[[noreturn]] void throw_errno(int err, std::string_view action, const std::string& path);

// Creates `dir` and its parents (std::filesystem::create_directories); errors as above.
void create_directories(const std::string& dir);

// Writes `bytes` to `path` through a fresh temporary (O_EXCL | O_NOFOLLOW: never through a planted
// link) renamed over `path`; with `durable`, fsynced before the rename. A reader sees the old file
// or the whole new one; the temporary is removed on any failure. `path` must be missing, a regular
// file or a symbolic link (the link itself is replaced, its target untouched): anything else — a
// device such as /dev/null, a FIFO, a socket, a directory — is refused before anything is written
// (require_replaceable). Errors as above. The temporary is `temporary`, or
// temporary_name(path, ".tmp-") when empty (checkpoint/atomic_file.h names its own, and syncs the
// directory after this returns).
void replace_file(const std::string& path, std::string_view bytes, bool durable = false,
                  const std::string& temporary = "");

// For every writer that renames a file into place: throws FailedPreconditionError naming `path`
// and its type when something exists there that is neither a regular file nor a symbolic link
// (rename(2) would replace a device node, a FIFO or a socket — as root, /dev/null itself). A
// missing path, a regular file and a link (which rename replaces, never writing its target) pass.
void require_replaceable(const std::string& path);

// "<path><tag><16 random hex digits>": a temporary name nobody can predict, so that no one who can
// create files in the directory can plant a link or a file there in advance (open it with
// File::create_new, which refuses anything already there). Draws from std::random_device.
std::string temporary_name(const std::string& path, std::string_view tag);

// What the file system object at `path` is, for messages: "a regular file", "a directory",
// "a FIFO", "a character device", "a symbolic link", ..., or "missing".
std::string describe_file_type(const std::string& path);

class File {
 public:
  File() = default;
  // Creates `path` for writing; fails with AlreadyExistsError if anything exists there, a
  // symbolic link included (O_EXCL | O_NOFOLLOW: a planted link is never followed).
  static File create_new(const std::string& path);
  // Opens an existing regular file for reading. A link to a regular file is followed (users link
  // their data sets); anything else — a FIFO, a directory, a device, a socket — is refused with
  // InvalidArgumentError naming the path and what it is, without blocking (a FIFO is opened
  // O_NONBLOCK for the check, so that no writer is waited for).
  static File open_for_read(const std::string& path);
  // Opens `path` for reading and writing, creating it (mode 0644) if missing, for files chorus
  // keeps in a directory it was given (the checkpoint directory's lock file). Never follows a
  // symbolic link, and refuses with FailedPreconditionError naming the path anything that is not
  // a regular file owned by the calling user: a planted link or another user's file is never
  // truncated or written.
  static File open_or_create_owned(const std::string& path);
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Writes all of `data` (retrying short writes and EINTR).
  void write_all(std::string_view data);
  // Reads up to n bytes; returns how many (0 at the end of the file).
  std::size_t read(void* buf, std::size_t n);
  // pread(2): up to n bytes from byte `offset`, without moving the file position; returns how
  // many (fewer only at the end of the file). Safe to call from several threads at once.
  std::size_t read_at(std::uint64_t offset, void* buf, std::size_t n) const;
  // Moves the read/write position to byte `offset` from the start.
  void seek(std::uint64_t offset);
  // The file's current size in bytes (fstat).
  std::uint64_t size() const;
  // fsync(2): the data is on disk when it returns.
  void sync();
  // close(2); the destructor closes too, but cannot report an error.
  void close();
  // The descriptor, for calls File does not wrap (flock); still owned by this File.
  int fd() const { return fd_; }

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace chorus::io
