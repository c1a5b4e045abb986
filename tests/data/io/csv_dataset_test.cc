// csv_dataset (data/io/csv.h): tensors of the column dtypes, files in order with headers, iterator
// save/restore at every record (plain and GZIP), the argument checks and the errors of next().
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include "tests/data/io/text_line_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/csv.h>

namespace chorus::data {
namespace {

using chorus::testing::TempDir;
using testing::deflate_bytes;
using testing::write_bytes;

// Each record as "i32|f32|str" text, errors as "E".
std::vector<std::string> rows(Iterator& it) {
  std::vector<std::string> out;
  for (;;) {
    try {
      auto e = it.next();
      if (!e) return out;
      EXPECT_EQ(e->size(), 3u);
      EXPECT_EQ((*e)[0].dtype(), DType::kInt32);
      EXPECT_EQ((*e)[1].dtype(), DType::kFloat64);
      EXPECT_EQ((*e)[2].dtype(), DType::kString);
      for (const Tensor& t : *e) EXPECT_EQ(t.shape().rank(), 0);
      out.push_back(std::to_string((*e)[0].item<std::int32_t>()) + "|" + std::to_string((*e)[1].item<double>()) + "|" +
                    (*e)[2].item<std::string>());
    } catch (const InvalidArgumentError&) {
      out.push_back("E");
    }
  }
}

const std::vector<CsvColumn> kColumns = {CsvColumn::required(DType::kInt32), CsvColumn::optional(-1.0),
                                         CsvColumn::optional(std::string("?"))};

TEST(CsvDatasetTest, TensorsFilesHeadersAndErrorsInPlace) {
  TempDir dir;
  write_bytes(dir.file("a.csv"), "id,x,s\n1,2.5,\"a,b\"\n2,,\n");
  write_bytes(dir.file("b.csv"), "id,x,s\nzz,1,c\r\n3,1e3,\"d\nd\"");
  auto it = csv_dataset({dir.file("a.csv"), dir.file("b.csv")}, kColumns, {.header = true}).make_iterator();
  EXPECT_EQ(rows(it), (std::vector<std::string>{"1|2.500000|a,b", "2|-1.000000|?", "E", "3|1000.000000|d\nd"}));
}

TEST(CsvDatasetTest, RestoredIteratorYieldsExactlyTheRemainingRecords) {
  TempDir dir;
  const std::string a = "h\n1,0.5,x\r\nbad,1,y\n2,,\"q\"\"q\"\n", b = "h,\"multi\nline\"\n3,3,z\n4,4,w";
  for (const char* comp : {"", "GZIP"}) {
    SCOPED_TRACE(comp);
    write_bytes(dir.file("a"), *comp ? deflate_bytes(a, true) : a);
    write_bytes(dir.file("b"), *comp ? deflate_bytes(b, true) : b);
    const auto ds = csv_dataset({dir.file("a"), dir.file("b")}, kColumns,
                                {.compression_type = comp, .buffer_size = 3, .header = true});
    auto first = ds.make_iterator();
    const auto all = rows(first);
    ASSERT_EQ(all, (std::vector<std::string>{"1|0.500000|x", "E", "2|-1.000000|q\"q", "3|3.000000|z", "4|4.000000|w"}));
    for (std::size_t k = 0; k <= all.size(); ++k) {
      auto it = ds.make_iterator();
      for (std::size_t i = 0; i < k; ++i) {
        try {
          it.next();
        } catch (const InvalidArgumentError&) {
        }
      }
      const IteratorState state = it.save();
      auto resumed = ds.make_iterator();
      resumed.restore(state);
      const std::vector<std::string> rest(all.begin() + static_cast<std::ptrdiff_t>(k), all.end());
      EXPECT_EQ(rows(resumed), rest) << k;
      EXPECT_EQ(rows(it), rest) << k;
    }
  }
}

TEST(CsvDatasetTest, ArgumentsAreCheckedWhenBuilt) {
  const auto bad = [](std::vector<CsvColumn> cols, CsvOptions o) {
    EXPECT_THROW(csv_dataset({"x"}, cols, o), InvalidArgumentError);
  };
  bad({}, {});
  bad({CsvColumn::required(DType::kBool)}, {});
  bad({CsvColumn::required(DType::kUInt8)}, {});
  bad({CsvColumn{DType::kInt32, CsvValue(1.5f)}}, {});  // a default of another type
  bad(kColumns, {.field_delim = ";;"});
  bad(kColumns, {.field_delim = ""});
  bad(kColumns, {.buffer_size = 0});
  bad(kColumns, {.buffer_size = -1});
  bad(kColumns, {.compression_type = "BZ2"});
  bad(kColumns, {.select_cols = {2, 1, 3}});
  bad(kColumns, {.select_cols = {-1, 1, 2}});
  bad(kColumns, {.select_cols = {0, 1}});
  bad(kColumns, {.select_cols = {0, 1, 2}, .exclude_cols = {3}});
  bad(kColumns, {.exclude_cols = {3, 3}});
  EXPECT_NO_THROW(csv_dataset({"x"}, kColumns, {.select_cols = {0, 4, 9}}));
}

TEST(CsvDatasetTest, OversizedRecordAndBrokenFileThenTheNextFile) {
  TempDir dir;
  write_bytes(dir.file("wide.csv"), "1,1,a\n2,2," + std::string(200, 'b') + "\n3,3,c\n");
  const std::string gz = deflate_bytes("4,4,d\n5,5,e\n", true);
  write_bytes(dir.file("cut.gz"), gz.substr(0, gz.size() - 4));
  write_bytes(dir.file("ok.csv"), "6,6,f\n");
  auto it =
      csv_dataset({dir.file("wide.csv"), dir.file("ok.csv")}, kColumns, {.max_record_bytes = 100}).make_iterator();
  EXPECT_EQ((*it.next())[0].item<std::int32_t>(), 1);
  EXPECT_THROW(it.next(), ResourceExhaustedError);
  EXPECT_EQ((*it.next())[0].item<std::int32_t>(), 6);
  it = csv_dataset({dir.file("cut.gz")}, kColumns, {.compression_type = "GZIP"}).make_iterator();
  // Only the gzip trailer is cut: every record arrived and is returned, then the cut is reported.
  EXPECT_EQ((*it.next())[0].item<std::int32_t>(), 4);
  EXPECT_EQ((*it.next())[0].item<std::int32_t>(), 5);
  EXPECT_THROW(it.next(), DataLossError);
  EXPECT_FALSE(it.next());
}

}  // namespace
}  // namespace chorus::data
