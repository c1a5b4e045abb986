// text_line_dataset (data/io/text_line.h): files in order, TensorFlow's lines on the same files,
// iterator save/restore at every line (plain and compressed), and the errors of next().
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include "tests/data/io/text_line_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/text_line.h>

namespace chorus::data {
namespace {

using chorus::testing::TempDir;
using testing::deflate_bytes;
using testing::write_bytes;
using Lines = std::vector<std::string>;

Lines all_lines(Iterator& it) {
  Lines out;
  while (auto e = it.next()) {
    EXPECT_EQ(e->size(), 1u);
    EXPECT_EQ((*e)[0].dtype(), DType::kString);
    EXPECT_EQ((*e)[0].shape().rank(), 0);
    out.push_back((*e)[0].item<std::string>());
  }
  return out;
}
Lines all_lines(const Dataset& ds) {
  auto it = ds.make_iterator();
  return all_lines(it);
}

TEST(TextLineDatasetTest, FilesInOrder) {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "a1\r\na2\n");
  write_bytes(dir.file("b.txt"), "");
  write_bytes(dir.file("c.txt"), "c1\n\nc3");
  EXPECT_EQ(all_lines(text_line_dataset({dir.file("a.txt"), dir.file("b.txt"), dir.file("c.txt")})),
            (Lines{"a1", "a2", "c1", "", "c3"}));
  EXPECT_EQ(text_line_dataset({dir.file("a.txt")}).cardinality(), kUnknownCardinality);
  EXPECT_EQ(text_line_dataset({}).cardinality(), 0);
  EXPECT_TRUE(all_lines(text_line_dataset({})).empty());
}

// For every k: an iterator that read k lines, saved and restored into a fresh one, yields exactly
// the remaining lines — plain, GZIP and ZLIB, with a buffer small enough that offsets fall inside it.
TEST(TextLineDatasetTest, RestoredIteratorYieldsExactlyTheRemainingLines) {
  TempDir dir;
  const std::string a = "one\r\ntwo\n\nthree\rx\nfour", b = "\nfive\n";
  for (const char* comp : {"", "GZIP", "ZLIB"}) {
    SCOPED_TRACE(comp);
    const bool z = *comp != 0;
    write_bytes(dir.file("a"), z ? deflate_bytes(a, comp[0] == 'G') : a);
    write_bytes(dir.file("b"), z ? deflate_bytes(b, comp[0] == 'G') : b);
    const auto ds = text_line_dataset({dir.file("a"), dir.file("b")}, {.compression_type = comp, .buffer_size = 3});
    const Lines all = all_lines(ds);
    ASSERT_EQ(all, (Lines{"one", "two", "", "threex", "four", "", "five"}));
    for (std::size_t k = 0; k <= all.size(); ++k) {
      auto it = ds.make_iterator();
      for (std::size_t i = 0; i < k; ++i) it.next();
      const IteratorState state = it.save();
      auto resumed = ds.make_iterator();
      resumed.restore(state);
      EXPECT_EQ(all_lines(resumed), Lines(all.begin() + static_cast<std::ptrdiff_t>(k), all.end())) << k;
      EXPECT_EQ(all_lines(it), Lines(all.begin() + static_cast<std::ptrdiff_t>(k), all.end())) << k;
    }
  }
}

TEST(TextLineDatasetTest, ArgumentsAreCheckedWhenBuilt) {
  EXPECT_THROW(text_line_dataset({"x"}, {.compression_type = "BZ2"}), InvalidArgumentError);
  EXPECT_THROW(text_line_dataset({"x"}, {.buffer_size = -1}), InvalidArgumentError);
  EXPECT_THROW(text_line_dataset({"x"}, {.buffer_size = kTextMaxBufferBytes + 1}), InvalidArgumentError);
  EXPECT_NO_THROW(text_line_dataset({"x"}, {.compression_type = "NONE", .buffer_size = 1}));
}

TEST(TextLineDatasetTest, StateFromAnotherPipelineIsRefused) {
  auto it = text_line_dataset({"x"}).make_iterator();
  IteratorState bad;
  bad.set_int("text_line.file", 5);
  bad.set_int("text_line.offset", 0);
  EXPECT_THROW(it.restore(bad), InvalidArgumentError);
  EXPECT_THROW(it.restore(IteratorState{}), NotFoundError);
}

// next()'s errors: a broken or oversized file is reported once and the next file follows; a
// missing file is reported again (as TF, which does not skip it).
TEST(TextLineDatasetTest, ErrorsThenTheNextFile) {
  TempDir dir;
  const std::string gz = deflate_bytes("kept\n" + std::string(5000, 'y') + "\n", true);
  write_bytes(dir.file("cut.gz"), gz.substr(0, gz.size() - 10));
  write_bytes(dir.file("ok.gz"), deflate_bytes("after\n", true));
  auto it = text_line_dataset({dir.file("cut.gz"), dir.file("ok.gz")}, {.compression_type = "GZIP"}).make_iterator();
  EXPECT_EQ((*it.next())[0].item<std::string>(), "kept");
  EXPECT_THROW(it.next(), DataLossError);
  EXPECT_EQ((*it.next())[0].item<std::string>(), "after");
  EXPECT_FALSE(it.next());

  write_bytes(dir.file("long.txt"), "a\n" + std::string(100, 'x') + "\nb\n");
  write_bytes(dir.file("next.txt"), "c\n");
  it = text_line_dataset({dir.file("long.txt"), dir.file("next.txt")}, {.max_line_bytes = 99}).make_iterator();
  EXPECT_EQ((*it.next())[0].item<std::string>(), "a");
  try {
    it.next();
    ADD_FAILURE() << "no error";
  } catch (const ResourceExhaustedError& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 2 in " + dir.file("long.txt")), std::string::npos) << e.what();
  }
  EXPECT_EQ((*it.next())[0].item<std::string>(), "c");

  it = text_line_dataset({dir.file("missing.txt")}).make_iterator();
  EXPECT_THROW(it.next(), NotFoundError);
  EXPECT_THROW(it.next(), NotFoundError);
}

}  // namespace
}  // namespace chorus::data
