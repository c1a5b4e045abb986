// The SSTable builder and reader on their own: LevelDB's key shortening, the layout of small
// tables worked out by hand, round trips over many blocks, and malformed blocks.
#include <chorus/checkpoint/table.h>

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>

#include "tests/checkpoint/bundle_test_util.h"
#include <chorus/checkpoint/bundle_format.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>

namespace chorus::train::internal {
namespace {

using chorus::train::testing::hex;

std::vector<std::pair<std::string, std::string>> read_all(const std::string& table) {
  std::vector<std::pair<std::string, std::string>> out;
  read_table(table, "t", [&](std::string_view k, std::string_view v) { out.emplace_back(k, v); });
  return out;
}

// The footer's {metaindex offset, size, index offset, size}.
std::array<std::uint64_t, 4> footer_handles(const std::string& t) {
  std::array<std::uint64_t, 4> h{};
  std::size_t pos = t.size() - 48;
  for (auto& v : h)
    for (int s = 0;; s += 7) {
      const auto b = static_cast<std::uint8_t>(t[pos++]);
      v |= std::uint64_t{b & 0x7fu} << s;
      if (!(b & 0x80)) break;
    }
  return h;
}

TEST(Table, ShortestSeparatorAndSuccessorAsInLevelDB) {
  std::string s = "abcd";
  find_shortest_separator(s, "abzz");
  EXPECT_EQ(s, "abd");
  s = "abcd";
  find_shortest_separator(s, "abd");  // 'c'+1 == 'd' is not < 'd': unchanged
  EXPECT_EQ(s, "abcd");
  s = "ab";
  find_shortest_separator(s, "abc");  // a prefix: unchanged
  EXPECT_EQ(s, "ab");
  s = "a\xff"
      "b";
  find_shortest_separator(s,
                          "a\xff"
                          "z");
  EXPECT_EQ(s,
            "a\xff"
            "c");
  s = "v/.ATTRIBUTES/VARIABLE_VALUE";
  find_short_successor(s);
  EXPECT_EQ(s, "w");
  s = "\xff\xff"
      "a";
  find_short_successor(s);
  EXPECT_EQ(s,
            "\xff\xff"
            "b");
  s = "\xff\xff";
  find_short_successor(s);
  EXPECT_EQ(s, "\xff\xff");
}

TEST(Table, EmptyTableLayout) {
  TableBuilder b;
  const std::string t = b.finish();
  // metaindex (8 B + trailer) at 0, index (8 B + trailer) at 13, footer.
  const std::string empty_block = "0000000001000000";
  const char type = 0;
  const std::string block = chorus::train::testing::unhex(empty_block);
  const std::uint32_t crc = mask_crc32c(crc32c(&type, 1, crc32c(block.data(), block.size())));
  std::string trailer(5, '\0');
  std::memcpy(trailer.data() + 1, &crc, 4);
  ASSERT_EQ(t.size(), 13u + 13u + 48u);
  EXPECT_EQ(t.substr(0, 13), block + trailer);
  EXPECT_EQ(t.substr(13, 13), block + trailer);
  EXPECT_EQ(hex(t.substr(26, 4)), "00080d08");  // handles {0,8} {13,8}
  EXPECT_EQ(hex(t.substr(t.size() - 8)), "57fb808b247547db");
  EXPECT_TRUE(read_all(t).empty());
}

TEST(Table, PrefixCompressionAndRestarts) {
  TableBuilder b;
  for (int i = 0; i < 40; ++i) b.add("key" + std::to_string(100 + i), "v" + std::to_string(i));
  const std::string t = b.finish();
  // Entry 0: shared 0, non_shared 6 "key100", value 2 "v0"; entry 1 shares "key10": 5, 1 "1", 2 "v1".
  EXPECT_EQ(t.substr(0, 11), std::string("\x00\x06\x02key100v0", 11));
  EXPECT_EQ(t.substr(11, 6), std::string("\x05\x01\x02"
                                         "1v1",
                                         6));
  const auto all = read_all(t);
  ASSERT_EQ(all.size(), 40u);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(all[i].first, "key" + std::to_string(100 + i));
    EXPECT_EQ(all[i].second, "v" + std::to_string(i));
  }
  // 40 entries, restart interval 16: restarts at entries 0, 16, 32 → 3 restart points.
  const std::size_t metaindex_off = footer_handles(t)[0];
  std::uint32_t n;
  std::memcpy(&n, t.data() + metaindex_off - 5 - 4, 4);
  EXPECT_EQ(n, 3u);
}

TEST(Table, ManyBlocksRoundTrip) {
  TableBuilder b;
  std::map<std::string, std::string> want;
  for (int i = 0; i < 20000; ++i) {
    std::string k = "k" + std::to_string(1000000 + i * 7);
    want[k] = std::string(static_cast<std::size_t>(i % 50), static_cast<char>('a' + i % 26));
  }
  for (const auto& [k, v] : want) b.add(k, v);
  EXPECT_EQ(b.num_entries(), 20000u);
  const std::string t = b.finish();
  EXPECT_GT(t.size(), 2 * kBlockSize);  // three data blocks at least
  const auto all = read_all(t);
  ASSERT_EQ(all.size(), want.size());
  auto it = want.begin();
  for (const auto& [k, v] : all) {
    EXPECT_EQ(k, it->first);
    EXPECT_EQ(v, it->second);
    ++it;
  }
}

TEST(Table, KeysMustIncrease) {
  TableBuilder b;
  b.add("b", "");
  EXPECT_THROW(b.add("a", ""), InternalError);
  EXPECT_THROW(b.add("b", ""), InternalError);
}

TEST(Table, SnappyBlockIsUnimplemented) {
  TableBuilder b;
  b.add("a", "1");
  std::string t = b.finish();
  // Re-type the data block as Snappy (1) and fix its CRC: the reader must refuse, not misparse.
  const std::size_t block_size = footer_handles(t)[0] - 5;  // the data block ends where the metaindex starts
  t[block_size] = 1;
  const std::uint32_t crc = mask_crc32c(crc32c(t.data(), block_size + 1));
  std::memcpy(t.data() + block_size + 1, &crc, 4);
  EXPECT_THROW(read_all(t), UnimplementedError);
}

}  // namespace
}  // namespace chorus::train::internal
