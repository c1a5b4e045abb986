// CsvDataset: TF 2.21's number parsing and field rules on bytes (csv_internal.h), then the dataset
// against TensorFlow on the same files and its iterator state.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

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
  for (const char* bad : {"2147483648", "-2147483649", "0x10", "1.0", "1e3", "- 1", "+-1", "--1", "", " ", "12a",
                          "1 2", "+", "-", "99999999999999999999"})
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
  for (const char* bad : {"0x", ".", "1e", "1e+", "1_0", "- 1", "1 e5", "", " ", "+-1", "--1", "0x1p", "0xg",
                          "nan(", "nan(a-b)", "infinit", "inf1", "0x-1", "0xinf", "1,5", "1..2", "e5"})
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
      out += std::visit([](const auto& x) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) return x; else return std::to_string(x);
      }, v) + "|";
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
  EXPECT_EQ(show(parse_all("\"\",\"\"\"\"\n", spec({S, S}, {CsvValue(std::string("d")), std::nullopt}))),
            "(d|\"|) ");
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
      EXPECT_NE(std::string(e.what()).find("record 1 at byte offset 3 of <string> is longer than max_record_bytes = 10"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace chorus::data
