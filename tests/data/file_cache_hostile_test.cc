// cache(filename) meets files it did not write, or that were damaged: cut short, garbage, empty, a
// directory, symlinks (to a cache, to a directory, to /dev/zero, dangling), valid framing around
// hostile element records (huge dimensions, bad dtype, wrong footer count), a flipped byte. Each
// gets its documented error class before any element of a damaged file is trusted — never a
// crash, a hang or an allocation larger than the file.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "tests/data/data_test_util.h"
#include <chorus/data/cache_file_internal.h>
#include <chorus/data/dataset.h>
#include <chorus/data/tfrecord.h>

namespace chorus::data {
namespace {

using chorus::internal::str_cat;
using testing::slurp;
using testing::spit;
using testing::TempDir;
using testing::values;
using V = std::vector<std::int64_t>;
namespace fs = std::filesystem;

Dataset source() {
  return Dataset::range(6).map([](const Element& e) { return Element{e[0], e[0]}; });
}

// A valid cache of source() at `path`.
void write_cache(const std::string& path) { testing::describe_all(source().cache(path)); }

void expect_first_next_throws_data_loss(const std::string& path, const std::string& what) {
  auto it = source().cache(path).make_iterator();
  EXPECT_THROW_WITH(it.next(), DataLossError, what);
  EXPECT_THROW(it.next(), DataLossError);  // and again: no element of the file is ever trusted
}

TEST(FileCacheHostile, TruncatedAtEveryLength) {
  TempDir dir;
  write_cache(dir / "good");
  const std::string bytes = slurp(dir / "good");
  ASSERT_GT(bytes.size(), 60u);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    spit(dir / "cut", bytes.substr(0, n));
    auto it = source().cache(dir / "cut").make_iterator();
    EXPECT_THROW(it.next(), DataLossError) << "cut to " << n << " of " << bytes.size() << " bytes";
  }
  // ... and grown: trailing bytes are not a footer either.
  spit(dir / "grown", bytes + "xyz");
  expect_first_next_throws_data_loss(dir / "grown", "footer");
}

TEST(FileCacheHostile, GarbageAndEmptyFiles) {
  TempDir dir;
  spit(dir / "garbage", std::string(4096, '\x5a'));
  expect_first_next_throws_data_loss(dir / "garbage", "garbage");
  spit(dir / "empty", "");
  expect_first_next_throws_data_loss(dir / "empty", "not a chorus cache file");
  write_tfrecord_file(dir / "tfrecord", {"a", "b"});  // right framing, not a cache
  expect_first_next_throws_data_loss(dir / "tfrecord", "not a chorus cache file");
}

TEST(FileCacheHostile, AFlippedByteIsCaughtByTheCRC) {
  TempDir dir;
  write_cache(dir / "good");
  std::string bytes = slurp(dir / "good");
  bytes[bytes.size() / 2] ^= 0x40;
  spit(dir / "flipped", bytes);
  auto it = source().cache(dir / "flipped").make_iterator();
  bool threw = false;
  for (int i = 0; i < 8 && !threw; ++i) {
    try {
      if (!it.next()) break;
    } catch (const DataLossError& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("CRC"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(threw);
}

TEST(FileCacheHostile, DirectoriesDevicesAndSymlinks) {
  TempDir dir;
  fs::create_directory(dir / "adir");
  EXPECT_THROW_WITH(source().cache(dir / "adir").make_iterator(), InvalidArgumentError, "is a directory");
  // A symlink to a valid cache reads as that cache (stat follows links), without the input.
  write_cache(dir / "good");
  fs::create_symlink(dir / "good", dir / "link_good");
  int reads = 0;
  auto counted = Dataset::range(6).map([&reads](const Element& e) {
    ++reads;
    return Element{e[0], e[0]};
  });
  EXPECT_EQ(values(counted.cache(dir / "link_good")), (V{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(reads, 0);
  fs::create_directory_symlink(dir / "adir", dir / "link_dir");
  EXPECT_THROW_WITH(source().cache(dir / "link_dir").make_iterator(), InvalidArgumentError, "is a directory");
  fs::create_symlink("/dev/zero", dir / "link_zero");
  EXPECT_THROW_WITH(source().cache(dir / "link_zero").make_iterator(), InvalidArgumentError, "not a regular file");
  // A dangling link is no cache: the pass writes one, replacing the link by the file.
  fs::create_symlink(dir / "nowhere", dir / "dangling");
  EXPECT_EQ(values(source().cache(dir / "dangling")), (V{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir / "dangling")));
  EXPECT_FALSE(fs::exists(dir / "nowhere"));
  // A file in a directory that does not exist: NotFoundError naming it, when writing starts.
  EXPECT_THROW_WITH(source().cache(dir / "no/such/dir/cache").make_iterator().next(), NotFoundError, "no/such/dir");
}

// Valid TFRecord framing and header around the given element records and footer.
void forge(const std::string& path, const std::vector<std::string>& elements, std::uint64_t count) {
  std::vector<std::string> records{std::string(internal::kCacheHeader)};
  std::uint64_t offset = 16 + internal::kCacheHeader.size();
  for (const auto& e : elements) {
    records.push_back(e);
    offset += 16 + e.size();
  }
  records.push_back(internal::encode_cache_footer(count, offset));
  write_tfrecord_file(path, records);
}

std::string le64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i) & 0xFF));
  return s;
}

TEST(FileCacheHostile, HostileElementRecordsNeverAllocateBeyondTheFile) {
  TempDir dir;
  const std::string one = internal::encode_cache_element({Tensor::scalar<std::int64_t>(7)});
  forge(dir / "ok", {one}, 1);
  EXPECT_EQ(values(source().cache(dir / "ok")), (V{7}));

  // A [2^40, 2^40] float64 component in a 30-byte record.
  std::string huge = std::string("E") + std::string("\x01\0\0\0", 4) + std::string("\x01\x02", 2) + le64(1ull << 40) +
                     le64(1ull << 40);
  forge(dir / "huge", {huge}, 1);
  expect_first_next_throws_data_loss(dir / "huge", "more than the record");
  // 2^32 - 1 components announced in 5 bytes.
  forge(dir / "components", {std::string("E\xff\xff\xff\xff", 5)}, 1);
  expect_first_next_throws_data_loss(dir / "components", "components cannot fit");
  // Dtype code 200, rank 250.
  forge(dir / "dtype", {std::string("E\x01\0\0\0\xc8\0", 7)}, 1);
  expect_first_next_throws_data_loss(dir / "dtype", "dtype code 200");
  forge(dir / "rank", {std::string("E\x01\0\0\0\x05\xfa", 7)}, 1);
  expect_first_next_throws_data_loss(dir / "rank", "rank 250");
  // Trailing bytes, a wrong record type.
  forge(dir / "trailing", {one + "zz"}, 1);
  expect_first_next_throws_data_loss(dir / "trailing", "2 bytes after the last component");
  forge(dir / "type", {"Xabcd"}, 1);
  expect_first_next_throws_data_loss(dir / "type", "does not start with 'E'");
  // A footer whose count is not the number of records: found at the end of the pass.
  forge(dir / "count", {one, one, one}, 2);
  auto it = source().cache(dir / "count").make_iterator();
  it.next();
  it.next();
  EXPECT_THROW_WITH(it.next(), DataLossError, "more element records than its footer's 2");
  const std::string big = internal::encode_cache_element({Tensor::zeros(Shape{10}, DType::kInt64)});
  forge(dir / "count_low", {big, big}, 3);
  auto it2 = source().cache(dir / "count_low").make_iterator();
  it2.next();
  it2.next();
  EXPECT_THROW_WITH(it2.next(), DataLossError, "holds 2 elements but its footer says 3");
  // A count that could not fit in the file at all: refused before the first element.
  forge(dir / "count_huge", {one}, 1ull << 50);
  expect_first_next_throws_data_loss(dir / "count_huge", "cannot fit");
}

TEST(FileCacheHostile, ARestoredStateNamingAnotherFilesOffsetsIsRefused) {
  TempDir dir;
  write_cache(dir / "good");
  auto it = source().cache(dir / "good").make_iterator();
  it.next();
  IteratorState state = it.save();
  state.set_int("file_cache.offset", 1 << 30);
  auto other = source().cache(dir / "good").make_iterator();
  EXPECT_THROW_WITH(other.restore(state), InvalidArgumentError, "do not fit");
}

// Issue 40, item 3. The temporary file was "<cache>.tmp-<pid>-<n>", opened with fopen("wb"): a
// link planted at that name made chorus truncate and overwrite the link's target, and the rename
// then turned the cache itself into a link to it. Now its name ends in 64 random bits and it is
// created O_EXCL | O_NOFOLLOW. Links are planted at every name the old scheme could use.
TEST(FileCacheHostile, LinksPlantedAtTheTemporaryNamesAreNeverWrittenThrough) {
  TempDir dir;
  const std::string victim = dir / "victim", cache = dir / "cache";
  spit(victim, "precious");
  for (int n = 0; n < 4096; ++n) fs::create_symlink(victim, str_cat(cache, ".tmp-", ::getpid(), "-", n));
  EXPECT_EQ(values(source().cache(cache)), (V{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(slurp(victim), "precious") << "the link's target was written through";
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(cache))) << "the cache is a link";
  EXPECT_EQ(values(source().cache(cache)), (V{0, 1, 2, 3, 4, 5})) << "read back from the cache";
  // The names used now cannot be guessed: two passes never pick the same one, and planting them
  // all cannot deny the cache. What create_new does with a name that is taken:
  const std::string planted = dir / "planted";
  fs::create_symlink(victim, planted);
  EXPECT_THROW_WITH(TFRecordWriter::create_new(planted), AlreadyExistsError, planted);
  fs::create_symlink(dir / "nowhere", dir / "dangling_tmp");
  EXPECT_THROW(TFRecordWriter::create_new(dir / "dangling_tmp"), AlreadyExistsError);
  EXPECT_FALSE(fs::exists(dir / "nowhere")) << "a dangling link was followed and its target created";
  EXPECT_EQ(slurp(victim), "precious");
}

// Issue 40, item 8: a write to the cache that fails. RLIMIT_FSIZE stands in for a full disk
// without root (writes past it fail with EFBIG once SIGXFSZ is ignored), as in
// tests/checkpoint/bundle_crash_safety_test.cc.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit r = old_;
    r.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &r), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  struct rlimit old_ {};
  void (*old_handler_)(int) = nullptr;
};

Dataset wide_source(std::int64_t n) {  // elements of ~100 bytes each, value i in component 0
  return Dataset::range(n).map([](const Element& e) { return Element{e[0], Tensor::zeros(Shape{10}, DType::kInt64)}; });
}

struct Outcome {
  std::vector<std::int64_t> values;
  std::vector<std::string> errors;  // what() of each error, in order
  bool ended = false;               // next() returned end, and did so again when called again
};

// Calls next() until the end (at most `calls` times), recording every value and every error.
Outcome drain(Iterator it, int calls = 1000) {
  Outcome out;
  for (int i = 0; i < calls; ++i) {
    try {
      auto e = it.next();
      if (!e) {
        out.ended = !it.next().has_value();
        return out;
      }
      out.values.push_back((*e)[0].to_vector<std::int64_t>()[0]);
    } catch (const Error& e) {
      out.errors.push_back(e.what());
    }
  }
  return out;
}

// No cache and no temporary file is left behind: only `keep` is in the directory.
void expect_nothing_left(const TempDir& dir, const std::vector<std::string>& keep = {}) { EXPECT_EQ(dir.list(), keep); }

TEST(FileCacheHostile, AFullDiskFailsThePassOnceAndNoElementIsLost) {
  for (bool prefetch : {false, true}) {
    SCOPED_TRACE(prefetch ? "prefetch(2)" : "plain");
    TempDir dir;
    Outcome o;
    {
      FileSizeLimit limit(2048);  // 100 elements of ~120 framed bytes: the writes fail part-way
      Dataset ds = wide_source(100).cache(dir / "cache");
      if (prefetch) ds = ds.prefetch(2);
      o = drain(ds.make_iterator());
    }
    ASSERT_EQ(o.errors.size(), 1u) << (o.errors.empty() ? "" : o.errors[1]);
    EXPECT_NE(o.errors[0].find("RESOURCE_EXHAUSTED"), std::string::npos) << o.errors[0];
    EXPECT_NE(o.errors[0].find(dir / "cache"), std::string::npos) << o.errors[0];
    EXPECT_NE(o.errors[0].find("goes on uncached"), std::string::npos) << o.errors[0];
    EXPECT_EQ(o.values, testing::iota(0, 100)) << "every element, in order, the failed one included";
    EXPECT_TRUE(o.ended);
    expect_nothing_left(dir);
    // The next pass tries again (here with room) and makes the cache.
    EXPECT_EQ(values(wide_source(100).cache(dir / "cache")), testing::iota(0, 100));
    EXPECT_EQ(dir.list(), (std::vector<std::string>{"cache"}));
  }
}

TEST(FileCacheHostile, AFullDiskWhenTheCacheIsClosedFailsOnceThenEnds) {
  // Five small elements fit stdio's buffer: the failure shows only when the file is closed.
  TempDir dir;
  Outcome o;
  {
    FileSizeLimit limit(64);
    o = drain(wide_source(5).cache(dir / "cache").prefetch(2).make_iterator());
  }
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_NE(o.errors[0].find("RESOURCE_EXHAUSTED"), std::string::npos) << o.errors[0];
  EXPECT_NE(o.errors[0].find("the input has ended and no cache file was made"), std::string::npos) << o.errors[0];
  EXPECT_EQ(o.values, testing::iota(0, 5));
  EXPECT_TRUE(o.ended);
  expect_nothing_left(dir);
}

TEST(FileCacheHostile, AMissingOrReadOnlyDirectoryFailsOnceThenTheInputGoesOn) {
  for (bool prefetch : {false, true}) {
    SCOPED_TRACE(prefetch ? "prefetch(2)" : "plain");
    TempDir dir;
    Dataset missing = wide_source(100).cache(dir / "no/such/dir/cache");
    if (prefetch) missing = missing.prefetch(2);
    Outcome o = drain(missing.make_iterator());
    ASSERT_EQ(o.errors.size(), 1u);
    EXPECT_NE(o.errors[0].find("NOT_FOUND"), std::string::npos) << o.errors[0];
    EXPECT_NE(o.errors[0].find("no/such/dir"), std::string::npos) << o.errors[0];
    EXPECT_EQ(o.values, testing::iota(0, 100));
    EXPECT_TRUE(o.ended);
    expect_nothing_left(dir);

    if (::geteuid() == 0) continue;  // root writes anywhere: no read-only directory to test with
    fs::create_directory(dir / "ro");
    fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    Dataset ro = wide_source(100).cache(dir / "ro/cache");
    if (prefetch) ro = ro.prefetch(2);
    o = drain(ro.make_iterator());
    ASSERT_EQ(o.errors.size(), 1u);
    EXPECT_NE(o.errors[0].find("PERMISSION_DENIED"), std::string::npos) << o.errors[0];
    EXPECT_EQ(o.values, testing::iota(0, 100));
    EXPECT_TRUE(o.ended);
    EXPECT_TRUE(fs::is_empty(dir / "ro"));
    fs::permissions(dir / "ro", fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace chorus::data
