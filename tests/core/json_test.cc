// chorus's JSON reader (core/json_internal.h: nlohmann-json plus repeated keys, a depth limit and
// messages that say where the text is wrong) and the writer's treatment of bad UTF-8.
#include <gtest/gtest.h>

#include <string>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>
#include <chorus/core/json_internal.h>

namespace chorus::internal {
namespace {

using chorus::testing::message_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(JsonTest, ParsesEveryKindAndEscapesKeepingKeyOrder) {
  const Json v = parse_json(R"( {"z": [1, -2.5e2, true, false, null], "s": "x\"\\\/\n\u00e9\ud83d\ude00", "o": {}} )");
  ASSERT_TRUE(v.is_object());
  const Json& a = v.at("z");
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[0].get<double>(), 1.0);
  EXPECT_EQ(a[1].get<double>(), -250.0);
  EXPECT_TRUE(a[2].get<bool>());
  EXPECT_STREQ(json_kind(a[3]), "a boolean");
  EXPECT_STREQ(json_kind(a[4]), "null");
  EXPECT_EQ(v.at("s").get<std::string>(), "x\"\\/\n\xC3\xA9\xF0\x9F\x98\x80");  // é and U+1F600 in UTF-8
  EXPECT_TRUE(v.at("o").empty());
  EXPECT_EQ(v.begin().key(), "z");  // document order, not sorted
  EXPECT_EQ(v.find("missing"), v.end());
}

TEST(JsonTest, ErrorsNameTheLineAndColumn) {
  std::string m = message_of<InvalidArgumentError>([] { parse_json(R"({"a"  1})", "TF_CONFIG"); });
  EXPECT_TRUE(contains(m, "TF_CONFIG is not valid JSON at line 1, column 7: syntax error")) << m;
  EXPECT_TRUE(contains(m, "expected ':'")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json("{\"a\": [1,\n 2,,3]}"); });
  EXPECT_TRUE(contains(m, "JSON is not valid JSON at line 2, column 4")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json(R"({"a": "abc)"); });
  EXPECT_TRUE(contains(m, "missing closing quote")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json(R"({"a": 1} x)"); });
  EXPECT_TRUE(contains(m, "expected end of input")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json(R"("\x")"); });
  EXPECT_TRUE(contains(m, "forbidden character after backslash")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json(R"(["\ud83d"])"); });
  EXPECT_TRUE(contains(m, "surrogate")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json("01"); });
  EXPECT_TRUE(contains(m, "line 1, column 2")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json(""); });
  EXPECT_TRUE(contains(m, "unexpected end of input")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json("1e400"); });
  EXPECT_TRUE(contains(m, "not valid JSON")) << m;
}

TEST(JsonTest, RepeatedKeysAndDeepNestingAreErrors) {
  std::string m = message_of<InvalidArgumentError>([] { parse_json(R"({"a": 1, "b": {"c": 1, "c": 2}})", "T"); });
  EXPECT_TRUE(contains(m, "T is not valid JSON: key \"c\" appears twice in object \"b\"")) << m;
  m = message_of<InvalidArgumentError>([] { parse_json(R"({"a": 1, "a": 1})"); });
  EXPECT_TRUE(contains(m, "key \"a\" appears twice in the top-level object")) << m;
  // The same key in two different objects is fine.
  EXPECT_NO_THROW(parse_json(R"({"x": {"k": 1}, "y": {"k": 2}, "z": [{"k": 1}, {"k": 2}]})"));
  m = message_of<InvalidArgumentError>([] { parse_json(std::string(100, '[') + std::string(100, ']')); });
  EXPECT_TRUE(contains(m, "nest deeper than 64")) << m;
  EXPECT_NO_THROW(parse_json(std::string(60, '[') + std::string(60, ']')));
  // A million open brackets: an error, not a stack overflow.
  m = message_of<InvalidArgumentError>([] { parse_json(std::string(1 << 20, '[')); });
  EXPECT_TRUE(contains(m, "nest deeper than 64")) << m;
}

TEST(JsonTest, UntrustedBytesReachMessagesEscaped) {
  std::string m = message_of<InvalidArgumentError>([] { parse_json("{\"k\": \"\x1b[2J\"}", "T"); });
  EXPECT_EQ(m.find('\x1b'), std::string::npos) << m;
  EXPECT_TRUE(contains(m, "U+001B")) << m;  // nlohmann's own escape
  m = message_of<InvalidArgumentError>([] { parse_json("{\"k\": \"\xff\"}", "T"); });
  EXPECT_EQ(m.find('\xff'), std::string::npos) << m;
  EXPECT_TRUE(contains(m, "ill-formed UTF-8")) << m;
  EXPECT_TRUE(contains(m, "\\xFF")) << m;  // printable()'s
}

}  // namespace
}  // namespace chorus::internal
