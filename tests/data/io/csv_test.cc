// CsvDataset: TF 2.21's number parsing and field rules on bytes (csv_internal.h), then the dataset
// against TensorFlow on the same files and its iterator state.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include "tests/data/io/text_line_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/csv_internal.h>

namespace chorus::data {
namespace {

using internal::CsvKind;
using internal::CsvResult;
using internal::CsvSpec;
using internal::parse_csv;
using internal::parse_double;
using internal::parse_float;
using internal::parse_int32;
using internal::parse_int64;
using Row = std::vector<CsvValue>;

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CsvNumbersTest, IntegersAsAbslSimpleAtoi) {
  EXPECT_EQ(parse_int32("0"), 0);
  EXPECT_EQ(parse_int32("-0"), 0);
  EXPECT_EQ(parse_int32("+5"), 5);
  EXPECT_EQ(parse_int32(" 7 "), 7);
  EXPECT_EQ(parse_int32("\t8\t"), 8);
  EXPECT_EQ(parse_int32("\v9\f\r\n"), 9);
  EXPECT_EQ(parse_int32("007"), 7);
  EXPECT_EQ(parse_int32("2147483647"), 2147483647);
  EXPECT_EQ(parse_int32("-2147483648"), std::numeric_limits<std::int32_t>::min());
  for (const char* bad : {"2147483648", "-2147483649", "0x10", "1.0", "1e3", "- 1", "+-1", "--1", "", " ", "12a", "1 2",
                          "+", "-", "99999999999999999999"})
    EXPECT_EQ(parse_int32(bad), std::nullopt) << bad;
  EXPECT_EQ(parse_int64("9223372036854775807"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(parse_int64("-9223372036854775808"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(parse_int64("9223372036854775808"), std::nullopt);
  EXPECT_EQ(parse_int64("-9223372036854775809"), std::nullopt);
  EXPECT_EQ(parse_int64(std::string("1\0", 2)), std::nullopt);
}

TEST(CsvNumbersTest, FloatsAsAbslSimpleAtof) {
  EXPECT_EQ(parse_float("1.5"), 1.5f);
  EXPECT_EQ(parse_float(" 1.5 "), 1.5f);
  EXPECT_EQ(parse_float("+1"), 1.0f);
  EXPECT_EQ(parse_float("+.5"), 0.5f);
  EXPECT_EQ(parse_float("1."), 1.0f);
  EXPECT_EQ(parse_float("1E5"), 1e5f);
  EXPECT_EQ(parse_float("0x10"), 16.0f);
  EXPECT_EQ(parse_float("0X10"), 16.0f);
  EXPECT_EQ(parse_float("-0x1A"), -26.0f);
  EXPECT_EQ(parse_float("0x1p3"), 8.0f);
  EXPECT_EQ(parse_float("0x1.8"), 1.5f);
  EXPECT_EQ(parse_float("0x1FFFFFFFFFFFFFFFFF"), 0x1p69f);  // 2^69 - 1 rounds to 2^69
  EXPECT_EQ(parse_float("inf"), kInf);
  EXPECT_EQ(parse_float("+inf"), kInf);
  EXPECT_EQ(parse_float("-inf"), -kInf);
  EXPECT_EQ(parse_float("INF"), kInf);
  EXPECT_EQ(parse_float("Infinity"), kInf);
  EXPECT_EQ(parse_float("1e39"), kInf);  // past float32's range: inf, not an error
  EXPECT_EQ(parse_float("-1e39"), -kInf);
  EXPECT_EQ(parse_float("3.4028235e38"), std::numeric_limits<float>::max());
  EXPECT_EQ(parse_float("3.4028236e38"), kInf);
  EXPECT_EQ(parse_float("1e-50"), 0.0f);
  EXPECT_EQ(parse_float("1e-40"), 1e-40f);  // subnormal
  EXPECT_TRUE(std::signbit(*parse_float("-0")));
  for (const char* nan : {"nan", "NaN", "-nan", "nan(1)", "NAN(abc_9)", "+nan"})
    EXPECT_TRUE(std::isnan(parse_float(nan).value_or(0))) << nan;
  EXPECT_EQ(parse_float("0.1234567890123456789012345678901"), 0.12345679f);  // long: still parsed
  // float32 rounding, not double's then float's: this decimal lies just above the midpoint of two
  // floats, but rounds (as a double) to exactly that midpoint, whose tie goes to the other one.
  EXPECT_EQ(parse_float("1.00000005960464477550"), 1.00000011920928955078125f);
  for (const char* bad : {"0x",   ".",   "1e",   "1e+",      "1_0",     "- 1",  "1 e5", "",      " ",   "+-1",  "--1",
                          "0x1p", "0xg", "nan(", "nan(a-b)", "infinit", "inf1", "0x-1", "0xinf", "1,5", "1..2", "e5"})
    EXPECT_EQ(parse_float(bad), std::nullopt) << bad;
  EXPECT_EQ(parse_float(std::string("1\0", 2)), std::nullopt);
  EXPECT_EQ(parse_double("1e39"), 1e39);
  EXPECT_EQ(parse_double("1e400"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_double("-1e400"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_double("1e-400"), 0.0);
  EXPECT_EQ(parse_double("4.9e-324"), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(parse_double("0.1"), 0.1);
  EXPECT_EQ(parse_double("0x7FFFFFFFFFFFFFFF"), 0x1p63);
}

CsvSpec spec(std::vector<CsvKind> kinds, std::vector<std::optional<CsvValue>> defaults = {}) {
  CsvSpec s;
  s.kinds = kinds;
  s.defaults = defaults.empty() ? std::vector<std::optional<CsvValue>>(kinds.size()) : defaults;
  return s;
}
const auto S = CsvKind::kString;
const auto I = CsvKind::kInt32;

Row strings(std::vector<std::string> v) { return Row(v.begin(), v.end()); }
bool is_error(const CsvResult& r, const std::string& part) {
  const auto* msg = std::get_if<std::string>(&r);
  return msg && msg->find(part) != std::string::npos;
}
std::string show(const std::vector<CsvResult>& rs) {
  std::string out;
  for (const auto& r : rs) {
    if (const auto* m = std::get_if<std::string>(&r)) {
      out += "ERR[" + *m + "] ";
      continue;
    }
    out += "(";
    for (const auto& v : std::get<Row>(r))
      out += std::visit(
                 [](const auto& x) {
                   if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>)
                     return x;
                   else
                     return std::to_string(x);
                 },
                 v) +
             "|";
    out += ") ";
  }
  return out;
}

// Every case at several buffer sizes: a quote, '\r' or delimiter on a buffer boundary changes nothing.
std::vector<CsvResult> parse_all(std::string_view bytes, const CsvSpec& s, bool header = false) {
  const auto first = parse_csv(bytes, s, header, 1 << 16);
  for (std::size_t b : {1, 2, 3, 5}) EXPECT_EQ(show(parse_csv(bytes, s, header, b)), show(first)) << b;
  return first;
}

TEST(CsvRecordsTest, RecordsAndLineBreaks) {
  const auto ss = spec({S, S});
  for (const char* text : {"a,b\nc,d\n", "a,b\r\nc,d\r\n", "a,b\rc,d", "a,b\nc,d"}) {
    const auto r = parse_all(text, ss);
    ASSERT_EQ(r.size(), 2u) << text;
    EXPECT_EQ(std::get<Row>(r[0]), strings({"a", "b"}));
    EXPECT_EQ(std::get<Row>(r[1]), strings({"c", "d"}));
  }
  // An empty line is a record of one empty field: required → an error, with a default → the default.
  auto r = parse_all("a,b\n\nc,d\n", ss);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(is_error(r[1], "field 0 (column 0) is required but missing")) << show(r);
  EXPECT_TRUE(is_error(r[1], "record 1 (byte offset 4)")) << show(r);
  EXPECT_EQ(std::get<Row>(r[2]), strings({"c", "d"}));
  r = parse_all("a\n\nc\n", spec({S}, {CsvValue(std::string("x"))}));
  EXPECT_EQ(show(r), "(a|) (x|) (c|) ");
  EXPECT_TRUE(parse_all("", ss).empty());
}

TEST(CsvRecordsTest, QuotedFields) {
  auto r = parse_all("\"a,b\",\"c\"\"d\"\n\"e\nf\",g\n", spec({S, S}));
  EXPECT_EQ(show(r), "(a,b|c\"d|) (e\nf|g|) ");
  EXPECT_EQ(show(parse_all("\"a\"\r\n\"b\"\r", spec({S}))), "(a|) (b|) ");
  EXPECT_EQ(show(parse_all("\"\",\"\"\"\"\n", spec({S, S}, {CsvValue(std::string("d")), std::nullopt}))), "(d|\"|) ");
  // A bad quote: an error for the record, which ends where TF's does.
  r = parse_all("\"a\"x\"y\",b\nc,d\n", spec({S, S}));
  ASSERT_EQ(r.size(), 2u) << show(r);
  EXPECT_TRUE(is_error(r[0], "must be escaped")) << show(r);
  EXPECT_EQ(show({r[1]}), "(c|d|) ");
  r = parse_all("\"a\"x,b\nc,d\n", spec({S, S}));  // still quoted after the error: to the end of the file
  ASSERT_EQ(r.size(), 1u) << show(r);
  EXPECT_TRUE(is_error(r[0], "must be escaped")) << show(r);
  r = parse_all("a\"b,c\nc,d\n", spec({S, S}));
  EXPECT_TRUE(is_error(r[0], "unquoted field cannot hold")) << show(r);
  EXPECT_EQ(show({r[1]}), "(c|d|) ");
  r = parse_all("a,\"bc\nd,e\n", spec({S, S}));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(is_error(r[0], "ends inside the quoted field at column 1")) << show(r);
  auto noquote = spec({S, S, S});
  noquote.use_quote_delim = false;
  EXPECT_EQ(show(parse_all("\"a,b\",c\n", noquote)), "(\"a|b\"|c|) ");
}

TEST(CsvRecordsTest, FieldCountsDefaultsAndNaValue) {
  auto r = parse_all("a\nb,c\na,b,c\nd,e\n", spec({S, S}));
  EXPECT_TRUE(is_error(r[0], "has 1 of the 2 fields")) << show(r);
  EXPECT_EQ(show({r[1]}), "(b|c|) ");
  EXPECT_TRUE(is_error(r[2], "more fields than the 2")) << show(r);
  EXPECT_EQ(show({r[3]}), "(d|e|) ");
  auto na = spec({S, S}, {CsvValue(std::string("dflt")), CsvValue(std::string("e"))});
  na.na_value = "NA";
  EXPECT_EQ(show(parse_all("NA,b\n\"NA\",\"\"\n", na)), "(dflt|b|) (dflt|e|) ");
  r = parse_all("1,x\n", spec({I, I}));
  EXPECT_TRUE(is_error(r[0], "field 1 (column 1) is not a valid int32: 'x'")) << show(r);
  // The first error of a record is the one reported (TF's Status::Update).
  r = parse_all("y,x\n", spec({I, I}));
  EXPECT_TRUE(is_error(r[0], "field 0 (column 0) is not a valid int32: 'y'")) << show(r);
}

TEST(CsvRecordsTest, SelectAndExcludeColumns) {
  auto sel = spec({I, I});
  sel.select_cols = {1, 3};
  auto r = parse_all("1,2,3,4\n5,6\n1,2,3,4,5\n", sel);
  EXPECT_EQ(show({r[0]}), "(2|4|) ");
  EXPECT_TRUE(is_error(r[1], "has 1 of the 2")) << show(r);
  EXPECT_EQ(show({r[2]}), "(2|4|) ");
  auto exc = spec({I, I});
  exc.exclude_cols = {1};
  r = parse_all("1,2,3\n4,5,6,7\n", exc);
  EXPECT_EQ(show({r[0]}), "(1|3|) ");
  EXPECT_TRUE(is_error(r[1], "more fields")) << show(r);
  // A column that is not returned is not converted, but its quotes are still checked (as TF).
  sel.select_cols = {0, 2};
  r = parse_all("1,zz,3\n1,a\"b,3\n", sel);
  EXPECT_EQ(show({r[0]}), "(1|3|) ");
  EXPECT_TRUE(is_error(r[1], "unquoted field")) << show(r);
}

TEST(CsvRecordsTest, Header) {
  EXPECT_EQ(show(parse_all("h1,h2\n1,2\n", spec({I, I}), true)), "(1|2|) ");
  EXPECT_EQ(show(parse_all("\"h\n1\",h2\n1,2\n", spec({I, I}), true)), "(1|2|) ");  // a quoted header spans lines
  EXPECT_EQ(show(parse_all("h\n", spec({I}), true)), "");
  auto r = parse_all("", spec({I}), true);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(is_error(r[0], "can't read the header")) << show(r);
}

TEST(CsvRecordsTest, RecordPastTheCeiling) {
  auto s = spec({S, S});
  s.max_record_bytes = 10;
  EXPECT_EQ(show(parse_all("0123456789\n", spec({S}))), "(0123456789|) ");
  s = spec({S});
  s.max_record_bytes = 10;
  EXPECT_EQ(show(parse_csv("0123456789\n", s, false, 3)), "(0123456789|) ");
  for (const char* text : {"ab\n0123456789x\n", "ab\n\"012345678\"\"\"\n", "ab\n\"01234\n56789\n"}) {
    try {
      parse_csv(text, s, false, 3);
      FAIL() << text;
    } catch (const ResourceExhaustedError& e) {
      EXPECT_NE(
          std::string(e.what()).find("record 1 at byte offset 3 of <string> is longer than max_record_bytes = 10"),
          std::string::npos)
          << e.what();
    }
  }
}

// ---- against TensorFlow 2.21 ------------------------------------------------------------------

// A value as csv_interop.py writes TF's: i:<int>, f:<float bits, little-endian hex>, f:nan, s:<hex>.
std::string token(const CsvValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return "s:" + testing::to_hex(x);
        } else if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(x)) return "f:nan";
          return "f:" + testing::to_hex(std::string_view(reinterpret_cast<const char*>(&x), sizeof x));
        } else {
          return "i:" + std::to_string(x);
        }
      },
      v);
}

std::vector<std::int64_t> col_list(const std::string& word) {  // "l1:3" → {1, 3}
  std::vector<std::int64_t> out;
  std::string cur;
  for (char ch : word.substr(1) + ":") {
    if (ch == ':') {
      if (!cur.empty()) out.push_back(std::stoll(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return out;
}

// CASE name file compression header delim_hex quote n<na_hex> l<select> l<exclude> kind[=hex],...
struct CaseArgs {
  std::vector<CsvColumn> columns;
  CsvOptions options;
};
CaseArgs args_of(const testing::InteropCase& c) {
  CaseArgs a;
  a.options.compression_type = c.words[3] == "-" ? "" : c.words[3];
  a.options.header = c.words[4] == "1";
  a.options.field_delim = testing::from_hex(c.words[5]);
  a.options.use_quote_delim = c.words[6] == "1";
  a.options.na_value = testing::from_hex(c.words[7].substr(1));
  a.options.select_cols = col_list(c.words[8]);
  a.options.exclude_cols = col_list(c.words[9]);
  std::string cols = c.words[10] + ",";
  for (std::size_t at = 0, comma; (comma = cols.find(',', at)) != std::string::npos; at = comma + 1) {
    const std::string col = cols.substr(at, comma - at);
    const std::size_t eq = col.find('=');
    const std::string kind = col.substr(0, eq);
    const DType d = kind == "i32"   ? DType::kInt32
                    : kind == "i64" ? DType::kInt64
                    : kind == "f32" ? DType::kFloat32
                    : kind == "f64" ? DType::kFloat64
                                    : DType::kString;
    if (eq == std::string::npos) {
      a.columns.push_back(CsvColumn::required(d));
      continue;
    }
    const std::string text = testing::from_hex(col.substr(eq + 1));
    switch (d) {
      case DType::kInt32: a.columns.push_back(CsvColumn::optional(*parse_int32(text))); break;
      case DType::kInt64: a.columns.push_back(CsvColumn::optional(*parse_int64(text))); break;
      case DType::kFloat32: a.columns.push_back(CsvColumn::optional(*parse_float(text))); break;
      case DType::kFloat64: a.columns.push_back(CsvColumn::optional(*parse_double(text))); break;
      default: a.columns.push_back(CsvColumn::optional(text));
    }
  }
  return a;
}
CsvSpec spec_of(const testing::InteropCase& c) {
  const CaseArgs a = args_of(c);
  return CsvSpec::make(a.columns, a.options);
}

// What csv_dataset returns for the file, as tokens (errors: "E <class>", then on).
std::vector<std::string> dataset_tokens(const std::string& path, const testing::InteropCase& c) {
  const CaseArgs a = args_of(c);
  auto it = csv_dataset({path}, a.columns, a.options).make_iterator();
  std::vector<std::string> out;
  for (;;) {
    try {
      auto e = it.next();
      if (!e) break;
      std::string line = "R";
      for (std::size_t i = 0; i < e->size(); ++i) {
        const Tensor& t = (*e)[i];
        EXPECT_EQ(t.dtype(), a.columns[i].dtype);
        EXPECT_EQ(t.shape().rank(), 0);
        line += ' ';  // (not " " + token(...): GCC 12's -Wrestrict false positive)
        switch (t.dtype()) {
          case DType::kInt32: line += token(t.item<std::int32_t>()); break;
          case DType::kInt64: line += token(t.item<std::int64_t>()); break;
          case DType::kFloat32: line += token(t.item<float>()); break;
          case DType::kFloat64: line += token(t.item<double>()); break;
          default: line += token(t.item<std::string>());
        }
      }
      out.push_back(line);
    } catch (const chorus::Error& e) {
      out.push_back(testing::error_token(e));
      if (out.back() != "E InvalidArgumentError") break;
    }
  }
  return out;
}

// What chorus's record reader returns for the file, as tokens (errors: "E <class>", then on).
std::vector<std::string> chorus_tokens(const std::string& path, const testing::InteropCase& c) {
  const CsvSpec s = spec_of(c);
  const auto comp =
      c.words[3] == "-" ? internal::TextCompression::kNone : internal::parse_text_compression(c.words[3], "test");
  internal::BufferedInput in(std::make_unique<internal::TextFileSource>(path, comp, 1ull << 32), 1 << 16);
  internal::CsvRecordReader reader(in, s);
  std::vector<std::string> out;
  if (c.words[4] == "1") {
    try {
      reader.skip_header();
    } catch (const InvalidArgumentError& e) {
      out.push_back(testing::error_token(e));
    }
  }
  for (;;) {
    try {
      auto r = reader.next();
      if (!r) break;
      std::string line = "R";
      for (const CsvValue& v : *r) {
        line += ' ';
        line += token(v);
      }
      out.push_back(line);
    } catch (const InvalidArgumentError& e) {
      out.push_back(testing::error_token(e));
    }
  }
  return out;
}

class CsvInterop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto found = chorus::testing::find_interop_python("tensorflow");
    if (found.path.empty()) return;
    dir_ = new chorus::testing::TempDir();
    const std::string cmd =
        "'" + found.path + "' '" CHORUS_SOURCE_ROOT "/tests/data/io/csv_interop.py' " + dir_->path();
    if (chorus::testing::run_interop_command(cmd, "tf") == 0)
      cases_ = testing::read_interop_output(dir_->file("tf_csv.txt"));
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    std::string python;
    CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
    ASSERT_FALSE(cases_.empty()) << "csv_interop.py failed";
  }
  static inline chorus::testing::TempDir* dir_ = nullptr;
  static inline std::vector<testing::InteropCase> cases_;
};

TEST_F(CsvInterop, RecordsEqualTensorFlowsOnTheSameFiles) {
  std::size_t records = 0, errors = 0;
  for (const auto& c : cases_) {
    SCOPED_TRACE(c.words[1]);
    const auto got = chorus_tokens(dir_->file(c.words[2]), c);
    EXPECT_EQ(got, c.tokens);
    EXPECT_EQ(dataset_tokens(dir_->file(c.words[2]), c), c.tokens) << "csv_dataset";
    for (const auto& t : got) (t[0] == 'R' ? records : errors)++;
  }
  EXPECT_GT(records, 500u);
  EXPECT_GT(errors, 100u);
}

}  // namespace
}  // namespace chorus::data
