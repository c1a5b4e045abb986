// Damaged bundles: every flipped byte, every truncation, wrong magic, absurd sizes/offsets/
// handles, shapes that cannot be, data that does not match → DataLossError naming the file (and
// the key), never a crash or a huge allocation (the sanitizer build checks the latter two).
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "tests/checkpoint/bundle_test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/bundle_format.h>
#include <chorus/checkpoint/table.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::train {
namespace {

using testing::TempDir;
using wire::ProtoWriter;

// A small valid bundle: two numeric tensors and a string tensor.
std::string write_sample(const TempDir& dir, const std::string& name = "ckpt-1") {
  const std::string prefix = dir / name;
  BundleWriter w(prefix);
  w.add("dense/kernel", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, "/CPU:0"));
  w.add("dense/bias", Tensor::from_vector<std::int64_t>({7, 8}, "/CPU:0"));
  w.add_strings("_CHECKPOINTABLE_OBJECT_GRAPH", {"graph"});
  w.finish();
  return prefix;
}

// Opens and reads every key; returns what was read (as text) or rethrows.
std::string read_everything(const std::string& prefix) {
  BundleReader r(prefix);
  std::string out;
  for (const std::string& k : r.keys()) {
    out += k + "=";
    if (r.entry(k).is_string)
      for (const std::string& s : r.read_strings(k)) out += s + ",";
    else
      out += r.read(k).to_string();
    out += ";";
  }
  return out;
}

void expect_data_loss(const std::string& prefix, const std::string& must_mention) {
  try {
    read_everything(prefix);
    ADD_FAILURE() << "no error for " << prefix;
  } catch (const DataLossError& e) {
    EXPECT_NE(std::string(e.what()).find(must_mention), std::string::npos) << e.what();
  }
}

// Offsets of the regions of the sample's index (footer handles decoded by hand).
struct Layout {
  std::uint64_t data_block_end, metaindex_off, index_off, index_size, footer_off;
};
Layout layout_of(const std::string& index) {
  std::size_t pos = index.size() - 48;
  auto varint = [&] {
    std::uint64_t v = 0;
    for (int s = 0;; s += 7) {
      const auto b = static_cast<std::uint8_t>(index[pos++]);
      v |= std::uint64_t{b & 0x7fu} << s;
      if (!(b & 0x80)) return v;
    }
  };
  Layout l{};
  l.metaindex_off = varint();
  varint();
  l.index_off = varint();
  l.index_size = varint();
  l.data_block_end = l.metaindex_off;
  l.footer_off = index.size() - 48;
  return l;
}

TEST(BundleCorruption, EveryFlippedIndexByteIsCaughtOrHarmless) {
  TempDir dir;
  const std::string prefix = write_sample(dir);
  const std::string good = testing::slurp(index_filename(prefix));
  const std::string expected = read_everything(prefix);
  const Layout l = layout_of(good);
  int caught = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    testing::spit(index_filename(prefix), bad);
    try {
      // Only the footer's zero padding after the two handles is not covered by a CRC or the magic
      // (LevelDB ignores it too); a flip there must leave the bundle readable and unchanged.
      EXPECT_EQ(read_everything(prefix), expected) << "flip at " << i;
      EXPECT_GE(i, l.footer_off) << "undetected flip at " << i;
    } catch (const DataLossError& e) {
      ++caught;
      EXPECT_NE(std::string(e.what()).find(index_filename(prefix)), std::string::npos) << e.what();
      const std::string what = e.what();
      if (i < l.data_block_end + 5) {
        EXPECT_NE(what.find("checksum mismatch"), std::string::npos) << "flip at " << i << ": " << what;
      }
      if (i >= l.footer_off + 40) {
        EXPECT_NE(what.find("bad magic"), std::string::npos) << what;
      }
    }
  }
  EXPECT_GE(caught, static_cast<int>(l.footer_off) + 8);
}

TEST(BundleCorruption, EveryTruncation) {
  TempDir dir;
  const std::string prefix = write_sample(dir);
  const std::string good = testing::slurp(index_filename(prefix));
  for (std::size_t n = 0; n < good.size(); ++n) {
    testing::spit(index_filename(prefix), good.substr(0, n));
    expect_data_loss(prefix, index_filename(prefix));
  }
  testing::spit(index_filename(prefix), good.substr(0, 10));
  expect_data_loss(prefix, "too short");
  // Data file truncated: the constructor names the tensor that no longer fits.
  testing::spit(index_filename(prefix), good);
  const std::string data = testing::slurp(data_filename(prefix));
  for (std::size_t n = 0; n < data.size(); ++n) {
    testing::spit(data_filename(prefix), data.substr(0, n));
    expect_data_loss(prefix, "needs bytes");
  }
}

TEST(BundleCorruption, WrongMagic) {
  TempDir dir;
  const std::string prefix = write_sample(dir);
  std::string bad = testing::slurp(index_filename(prefix));
  bad[bad.size() - 1] = 0x00;
  testing::spit(index_filename(prefix), bad);
  expect_data_loss(prefix, "bad magic");
}

TEST(BundleCorruption, FlippedDataBytesNameFileAndKey) {
  TempDir dir;
  const std::string prefix = write_sample(dir);
  const std::string good = testing::slurp(data_filename(prefix));
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 1);
    testing::spit(data_filename(prefix), bad);
    try {
      read_everything(prefix);
      ADD_FAILURE() << "undetected data flip at " << i;
    } catch (const DataLossError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(data_filename(prefix)), std::string::npos) << what;
      EXPECT_TRUE(what.find("dense/kernel") != std::string::npos || what.find("dense/bias") != std::string::npos ||
                  what.find("_CHECKPOINTABLE_OBJECT_GRAPH") != std::string::npos)
          << what;
      EXPECT_TRUE(what.find("checksum does not match") != std::string::npos ||
                  what.find("DT_STRING") != std::string::npos)
          << what;
    }
  }
}

// Tensors of 1 MiB and more are checksummed on a worker thread while they are written (and, from
// 8 MiB on, written in pieces with writeback started after each): their CRC must still be the
// CRC of every byte, so a flip anywhere in them, even the very last byte, is caught.
TEST(BundleCorruption, FlipsAnywhereInLargeTensorsAreCaught) {
  TempDir dir;
  const std::string prefix = dir / "big";
  std::vector<float> values(std::size_t{9} << 18);  // 9 MiB: two write pieces, the second partial
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977) * 0.25f;
  std::vector<float> small(1000, 1.5f);
  {
    BundleWriter w(prefix);
    w.add("small_before", Tensor::from_vector<float>(small, "/CPU:0"));
    w.add("big", Tensor::from_vector<float>(values, "/CPU:0"));
    w.add("small_after", Tensor::from_vector<float>(small, "/CPU:0"));
    w.finish();
  }
  EXPECT_EQ(BundleReader(prefix).read("big").to_vector<float>(), values);
  const std::string good = testing::slurp(data_filename(prefix));
  const std::size_t big_begin = small.size() * 4, big_end = big_begin + values.size() * 4;
  for (std::size_t i :
       {big_begin, big_begin + (std::size_t{8} << 20) - 1, big_begin + (std::size_t{8} << 20), big_end - 1}) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    testing::spit(data_filename(prefix), bad);
    BundleReader r(prefix);
    EXPECT_EQ(r.read("small_before").to_vector<float>(), small);
    EXPECT_EQ(r.read("small_after").to_vector<float>(), small);
    try {
      r.read("big");
      ADD_FAILURE() << "undetected flip at byte " << i;
    } catch (const DataLossError& e) {
      EXPECT_NE(std::string(e.what()).find("checksum does not match"), std::string::npos) << e.what();
    }
  }
}

// ---- hand-made indexes with absurd fields ----

std::string entry_proto(int dtype, const std::vector<std::int64_t>& dims, std::int64_t offset, std::int64_t size,
                        std::uint32_t crc = 0, int shard = 0) {
  ProtoWriter shape;
  for (std::int64_t d : dims) {
    ProtoWriter dim;
    dim.add_int64(1, d);
    shape.add_message(2, dim);
  }
  ProtoWriter e;
  e.add_varint(1, static_cast<std::uint64_t>(dtype));
  e.add_message(2, shape);
  if (shard) e.add_int64(3, shard);
  e.add_int64(4, offset);
  e.add_int64(5, size);
  std::string out = e.release();
  out += '\x35';
  wire::append_fixed32(out, crc);
  return out;
}

// Writes `<dir>/x.index` holding the header and one entry "k" → `value`, and a data file of
// `data_bytes` zero bytes; returns the prefix.
std::string craft(const TempDir& dir, const std::string& value, std::size_t data_bytes = 64,
                  const std::string& header = internal::encode_bundle_header()) {
  internal::TableBuilder t;
  t.add("", header);
  t.add("k", value);
  testing::spit(dir / "x.index", t.finish());
  testing::spit(dir / "x.data-00000-of-00001", std::string(data_bytes, '\0'));
  return dir / "x";
}

TEST(BundleCorruption, AbsurdEntries) {
  TempDir dir;
  const std::int64_t big = std::int64_t{1} << 62;
  // Each must be DataLossError naming the key 'k'; none may allocate what it claims.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"negative dim", entry_proto(1, {-1}, 0, 4)},
      {"overflowing dims", entry_proto(1, {big, big}, 0, 4)},
      {"size mismatch", entry_proto(1, {3}, 0, 8)},
      {"negative offset", entry_proto(1, {1}, -4, 4)},
      {"negative size", entry_proto(1, {1}, 0, -4)},
      {"offset+size overflow", entry_proto(7, {}, std::numeric_limits<std::int64_t>::max(), 100)},
      {"huge tensor past the data", entry_proto(1, {big / 4}, 0, big)},
      {"huge string tensor past the data", entry_proto(7, {big / 8}, 0, big)},
      {"string elements > bytes", entry_proto(7, {100}, 0, 10)},
      {"past the end of the data file", entry_proto(1, {4}, 60, 16)},
      {"shard out of range", entry_proto(1, {1}, 0, 4, 0, 3)},
      {"dtype 0", entry_proto(0, {1}, 0, 4)},
      {"truncated proto", entry_proto(1, {1}, 0, 4).substr(0, 5)},
      {"absurd varint length", std::string("\x12\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10)},
      {"overlong varint", std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12)},
  };
  for (const auto& [what, value] : cases) {
    const std::string prefix = craft(dir, value);
    try {
      read_everything(prefix);
      ADD_FAILURE() << what << ": accepted";
    } catch (const DataLossError& e) {
      EXPECT_NE(std::string(e.what()).find("'k'"), std::string::npos) << what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(dir.path()), std::string::npos) << what << ": " << e.what();
    }
  }
}

TEST(BundleCorruption, BadHeaders) {
  TempDir dir;
  const std::string value = entry_proto(1, {1}, 0, 4);
  EXPECT_THROW(read_everything(craft(dir, value, 64, "\x08\x00")), DataLossError);                  // num_shards 0
  EXPECT_THROW(read_everything(craft(dir, value, 64, "\x08\xff\xff\xff\xff\x07")), DataLossError);  // huge
  EXPECT_THROW(read_everything(craft(dir, value, 64, "\x08\x01\x10\x01")), UnimplementedError);     // big endian
  EXPECT_THROW(read_everything(craft(dir, value, 64, "\x08\x01\x1a\x02\x10\x05")), FailedPreconditionError);
  // No header entry at all: the first key is "k".
  internal::TableBuilder t;
  t.add("k", value);
  testing::spit(dir / "y.index", t.finish());
  EXPECT_THROW(read_everything(dir / "y"), DataLossError);
}

TEST(BundleCorruption, AbsurdBlockHandles) {
  TempDir dir;
  const std::string prefix = write_sample(dir);
  const std::string good = testing::slurp(index_filename(prefix));
  const std::size_t footer = good.size() - 48;
  auto with_footer_handles = [&](std::uint64_t mo, std::uint64_t ms, std::uint64_t io, std::uint64_t is) {
    std::string h;
    for (std::uint64_t v : {mo, ms, io, is}) wire::append_varint(h, v);
    h.resize(40, '\0');
    return good.substr(0, footer) + h + good.substr(footer + 40);
  };
  const Layout l = layout_of(good);
  const std::uint64_t huge = std::uint64_t{1} << 63;
  for (const std::string& bad :
       {with_footer_handles(l.metaindex_off, 8, huge, 16), with_footer_handles(l.metaindex_off, 8, l.index_off, huge),
        with_footer_handles(huge, huge, l.index_off, l.index_size),
        with_footer_handles(l.metaindex_off, 8, footer - 3, 16), with_footer_handles(~0ull, ~0ull, ~0ull, ~0ull)}) {
    testing::spit(index_filename(prefix), bad);
    expect_data_loss(prefix, index_filename(prefix));
  }
}

TEST(BundleCorruption, DataFileMissingIsNotFoundOnRead) {
  TempDir dir;
  const std::string prefix = write_sample(dir);
  std::filesystem::remove(data_filename(prefix));
  BundleReader r(prefix);  // the index alone is fine
  EXPECT_EQ(r.keys().size(), 3u);
  EXPECT_THROW(r.read("dense/kernel"), NotFoundError);
  EXPECT_THROW(r.read_strings("_CHECKPOINTABLE_OBJECT_GRAPH"), NotFoundError);
}

TEST(BundleCorruption, UnknownDTypeIsListedButNotRead) {
  TempDir dir;
  // DT_INT16 (5) has no chorus DType: listed, read → UnimplementedError naming the key and dtype
  // as TF and its Python API call it.
  const std::string prefix = craft(dir, entry_proto(5, {2}, 0, 4, mask_crc32c(crc32c("\0\0\0\0", 4))));
  BundleReader r(prefix);
  EXPECT_EQ(r.entry("k").tf_dtype, 5);
  try {
    r.read("k");
    FAIL();
  } catch (const UnimplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'k' of checkpoint '" + prefix + "' has TF dtype DT_INT16 (int16)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace chorus::train
