#include <chorus/collective/store/file_store.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective {

using chorus::internal::join;
using chorus::internal::str_cat;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr char kMagic[5] = {'C', 'H', 'F', 'S', 1};
constexpr std::size_t kHeaderBytes = 5 + 4;
constexpr milliseconds kMaxPause{100};

// An owned descriptor, closed on every path out.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::uint64_t fnv1a(std::string_view s, std::uint64_t h) {
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

void check_key(const std::string& key, const std::string& what) {
  CHORUS_REQUIRE(!key.empty() && key.size() <= Store::kMaxKeyBytes, InvalidArgumentError, what, ": key \"",
                 key.substr(0, 64), key.size() > 64 ? "..." : "", "\" has ", key.size(), " bytes (valid: 1..",
                 Store::kMaxKeyBytes, ")");
}

void write_all(int fd, std::string_view bytes, const std::string& file) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    CHORUS_REQUIRE(n > 0, UnavailableError, "file store: cannot write ", file, ": ", std::strerror(errno));
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

// The value of `key` in `file`, or nullopt when the file does not exist.
std::optional<std::string> read_value(const std::string& file, const std::string& key) {
  Fd f(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (f.fd < 0) {
    CHORUS_REQUIRE(errno == ENOENT, UnavailableError, "file store: cannot open ", file, ": ", std::strerror(errno));
    return std::nullopt;
  }
  struct stat st {};
  CHORUS_REQUIRE(::fstat(f.fd, &st) == 0, UnavailableError, "file store: cannot stat ", file, ": ",
                 std::strerror(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  CHORUS_REQUIRE(
      S_ISREG(st.st_mode) && size >= kHeaderBytes && size <= kHeaderBytes + Store::kMaxKeyBytes + Store::kMaxValueBytes,
      DataLossError, "file store: ", file, " (key \"", key, "\") is not a store file: ", size, " bytes, expected ",
      kHeaderBytes, "..", kHeaderBytes + Store::kMaxKeyBytes + Store::kMaxValueBytes);
  std::string bytes(size, '\0');
  std::size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::read(f.fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    CHORUS_REQUIRE(n > 0, DataLossError, "file store: ", file, " ended after ", at, " of its ", size,
                   " bytes, or could not be read: ", n < 0 ? std::strerror(errno) : "end of file");
    at += static_cast<std::size_t>(n);
  }
  CHORUS_REQUIRE(std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0, DataLossError, "file store: ", file,
                 " does not start with the store's header (CHFS, version 1): a foreign file in the store's directory?");
  std::uint32_t key_bytes = 0;
  for (int i = 3; i >= 0; --i) key_bytes = (key_bytes << 8) | static_cast<unsigned char>(bytes[5 + i]);
  CHORUS_REQUIRE(key_bytes <= size - kHeaderBytes && std::string_view(bytes).substr(kHeaderBytes, key_bytes) == key,
                 DataLossError, "file store: ", file, " does not hold key \"", key,
                 "\" (its header names another key of ", key_bytes, " bytes: a hash collision or a damaged file)");
  return bytes.substr(kHeaderBytes + key_bytes);
}

}  // namespace

FileStore::FileStore(std::string path, milliseconds timeout) : path_(std::move(path)) {
  CHORUS_REQUIRE(!path_.empty(), InvalidArgumentError, "FileStore: the directory path is empty");
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  CHORUS_REQUIRE(!ec && std::filesystem::is_directory(path_), UnavailableError, "file store: cannot create directory ",
                 path_, ": ", ec ? ec.message() : "it exists and is not a directory");
  set_default_timeout(timeout);
}

std::string FileStore::describe() const { return str_cat("file store ", path_); }

std::string FileStore::file_of(const std::string& key) const {
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(fnv1a(key, 0xcbf29ce484222325ULL)),
                static_cast<unsigned long long>(fnv1a(key, 0x84222325cbf29ce4ULL)));
  return str_cat(path_, "/k", hex);
}

void FileStore::set(const std::string& key, std::string_view value) {
  check_key(key, describe());
  CHORUS_REQUIRE(value.size() <= kMaxValueBytes, InvalidArgumentError, describe(), ": the value of key \"", key,
                 "\" has ", value.size(), " bytes; at most ", kMaxValueBytes);
  static std::atomic<std::uint64_t> counter{0};
  const std::string file = file_of(key);
  const std::string temp = str_cat(file, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  std::string bytes(kMagic, sizeof(kMagic));
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((key.size() >> (8 * i)) & 0xff));
  bytes += key;
  bytes += value;
  {
    Fd f(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
    CHORUS_REQUIRE(f.fd >= 0, UnavailableError, "file store: cannot create ", temp, ": ", std::strerror(errno));
    try {
      write_all(f.fd, bytes, temp);
    } catch (...) {
      ::unlink(temp.c_str());
      throw;
    }
  }
  if (::rename(temp.c_str(), file.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw UnavailableError(str_cat("file store: cannot rename ", temp, " to ", file, ": ", std::strerror(err)));
  }
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  check_key(key, describe());
  const std::string lock_file = str_cat(path_, "/.add.lock");
  Fd lock(::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  CHORUS_REQUIRE(lock.fd >= 0, UnavailableError, "file store: cannot open ", lock_file, ": ", std::strerror(errno));
  int rc;
  while ((rc = ::flock(lock.fd, LOCK_EX)) != 0 && errno == EINTR) {
  }
  CHORUS_REQUIRE(rc == 0, UnavailableError, "file store: cannot lock ", lock_file, ": ", std::strerror(errno));
  const std::optional<std::string> old = read_value(file_of(key), key);
  std::int64_t v = 0;
  if (old) {
    const auto [end, ec] = std::from_chars(old->data(), old->data() + old->size(), v);
    CHORUS_REQUIRE(!old->empty() && ec == std::errc() && end == old->data() + old->size(), InvalidArgumentError,
                   describe(), ": add on key \"", key, "\", whose value is not a decimal integer");
  }
  std::int64_t sum = 0;
  CHORUS_REQUIRE(!__builtin_add_overflow(v, delta, &sum), InvalidArgumentError, describe(), ": add of ", delta,
                 " to key \"", key, "\" (", v, ") overflows int64");
  set(key, std::to_string(sum));
  return sum;  // the lock is released when `lock` closes
}

std::string FileStore::get(const std::string& key, milliseconds timeout) {
  check_key(key, describe());
  const auto deadline = Clock::now() + timeout;
  milliseconds pause{1};
  while (true) {
    if (std::optional<std::string> v = read_value(file_of(key), key)) return *std::move(v);
    const auto now = Clock::now();
    CHORUS_REQUIRE(now < deadline, DeadlineExceededError, describe(), ": key \"", key, "\" still missing after ",
                   timeout.count(), " ms");
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, kMaxPause);
  }
}

void FileStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  for (const auto& k : keys) check_key(k, describe());
  const auto deadline = Clock::now() + timeout;
  milliseconds pause{1};
  std::vector<std::string> missing = keys;
  while (true) {
    std::erase_if(missing, [&](const std::string& k) { return ::access(file_of(k).c_str(), F_OK) == 0; });
    if (missing.empty()) return;
    const auto now = Clock::now();
    CHORUS_REQUIRE(now < deadline, DeadlineExceededError, describe(), ": key(s) ",
                   join(missing, {.quote = "\"", .max_items = 8}), " still missing after ", timeout.count(), " ms");
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, kMaxPause);
  }
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) check_key(k, describe());
  for (const auto& k : keys)
    if (::access(file_of(k).c_str(), F_OK) != 0) return false;
  return true;
}

}  // namespace chorus::collective
