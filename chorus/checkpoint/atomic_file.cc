#include <chorus/checkpoint/atomic_file.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <chorus/checkpoint/bundle.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>

namespace chorus::train {

using io::File;
using io::throw_errno;

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string temporary_filename(const std::string& final_path) { return io::temporary_name(final_path, ".tempstate"); }

void rename_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_errno(errno, "cannot rename to '" + to + "' from", from);
}

bool remove_file_if_exists(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  throw_errno(errno, "cannot remove", path);
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  io::replace_file(path, contents, /*durable=*/true, temporary_filename(path));
  sync_directory(directory_of(path));
}

std::string read_file(const std::string& path, std::uint64_t max_bytes) {
  File f = File::open_for_read(path);  // a regular file: FIFOs, directories, devices refused
  const std::uint64_t size = f.size();
  CHORUS_REQUIRE(size <= max_bytes, DataLossError, "'", path, "' is ", size, " bytes, more than the ", max_bytes,
                 " such a file can reasonably be; not read (a damaged or foreign file?)");
  std::string out;
  out.resize(static_cast<std::size_t>(size));
  out.resize(f.read(out.data(), out.size()));
  // A file that grew meanwhile: read on, but never past the ceiling.
  char buf[65536];
  while (const std::size_t n = f.read(buf, sizeof buf)) {
    CHORUS_REQUIRE(out.size() + n <= max_bytes, DataLossError, "'", path, "' grew past ", max_bytes,
                   " bytes while read");
    out.append(buf, n);
  }
  return out;
}

}  // namespace chorus::train
