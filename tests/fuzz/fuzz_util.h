// Helpers shared by the libFuzzer targets of tests/fuzz/ (see README.md there).
//
// What counts as a finding, in every target: a crash or sanitizer report (ASan, UBSan), a leak, an
// allocation above -malloc_limit_mb, a timeout, an exception that is not a chorus::Error (it
// escapes LLVMFuzzerTestOneInput and aborts), a chorus::Error of a class the reader's contract
// does not name (trapped by expect_error), and a broken invariant of an accepted input (check()).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <typeinfo>

#include <chorus/core/error.h>

namespace chorus::fuzz {

inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    __builtin_trap();
  }
}

// Accepts a rejection only as one of the error classes the reader documents; any other
// chorus::Error is a finding (its message is printed before the trap).
template <typename... Allowed>
void expect_error(const chorus::Error& e) {
  if (((dynamic_cast<const Allowed*>(&e) != nullptr) || ...)) return;
  std::fprintf(stderr, "undocumented error class %s: %s\n", typeid(e).name(), e.what());
  __builtin_trap();
}

// A file the readers that take a path are fed through: one per process, under /dev/shm when it is
// writable (no disk I/O per execution), else $TMPDIR or /tmp. It is unlinked at once and read as
// /proc/self/fd/N, so that a run ended by a crash leaves nothing behind.
class ScratchFile {
 public:
  ScratchFile() {
    const char* tmp = std::getenv("TMPDIR");
    for (std::string dir : {std::string("/dev/shm"), std::string(tmp ? tmp : "/tmp"), std::string("/tmp")}) {
      std::string templ = dir + "/chorus-fuzz-XXXXXX";
      const int fd = ::mkstemp(templ.data());
      if (fd >= 0) {
        fd_ = fd;
        path_ = templ;
        break;
      }
    }
    if (fd_ < 0) {
      std::perror("chorus fuzz: cannot create a scratch file");
      std::abort();
    }
    const std::string by_fd = "/proc/self/fd/" + std::to_string(fd_);
    if (::access(by_fd.c_str(), R_OK) == 0) {
      ::unlink(path_.c_str());
      path_ = by_fd;
    }
  }
  ~ScratchFile() {
    ::close(fd_);
    if (path_.rfind("/proc/", 0) != 0) ::unlink(path_.c_str());
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents with `bytes`; returns its path.
  const std::string& hold(std::string_view bytes) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    return path_;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// The process's scratch file (a function-local static: destroyed, and so unlinked, at exit).
inline ScratchFile& scratch_file() {
  static ScratchFile file;
  return file;
}

inline std::string_view as_view(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace chorus::fuzz
