// core/strings.h's join, in every form chorus's messages use it.
#include <chorus/core/strings.h>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace chorus {
namespace {

using internal::join;

TEST(Join, SeparatorOnlyBetweenItems) {
  EXPECT_EQ(join(std::vector<std::string>{}), "");
  EXPECT_EQ(join(std::vector<std::string>{"CPU:0"}), "CPU:0");
  EXPECT_EQ(join(std::vector<std::string>{"CPU:0", "CPU:1"}), "CPU:0, CPU:1");
  EXPECT_EQ(join(std::vector<std::string>{"a", "b", "c"}, {.separator = ","}), "a,b,c");
}

TEST(Join, QuotesEachItem) {  // distribute/'s device lists, optimizer/'s variable names
  EXPECT_EQ(join(std::vector<std::string>{"/cpu:0", "/cpu:1"}, {.quote = "'"}), "'/cpu:0', '/cpu:1'");
  EXPECT_EQ(join(std::vector<std::string>{"x"}, {.quote = "'"}), "'x'");
}

TEST(Join, NumbersAndALastSeparator) {  // collective/'s rank lists
  EXPECT_EQ(join(std::vector<int>{0, 1}), "0, 1");
  EXPECT_EQ(join(std::vector<int>{0, 1}, {.last_separator = " and "}), "0 and 1");
  EXPECT_EQ(join(std::vector<int>{0, 2, 3}, {.last_separator = " and "}), "0, 2 and 3");
  EXPECT_EQ(join(std::vector<int>{7}, {.last_separator = " and "}), "7");
  EXPECT_EQ(join(std::set<int>{3, 1}), "1, 3");  // any range
}

TEST(Printable, UntrustedBytesCannotReachTheTerminalRaw) {
  EXPECT_EQ(internal::printable("node1"), "node1");
  EXPECT_EQ(internal::printable(std::string_view("a\x1b[2Jb\n\\\xff", 9)), "a\\x1B[2Jb\\x0A\\x5C\\xFF");
  EXPECT_EQ(internal::printable(std::string(100, 'x'), 4), "xxxx...");
  EXPECT_EQ(internal::printable(""), "");
}

TEST(SplitWhitespace, WordsOfALine) {
  EXPECT_EQ(internal::split_whitespace("  node1\tslots=4 \r\n"), (std::vector<std::string_view>{"node1", "slots=4"}));
  EXPECT_TRUE(internal::split_whitespace(" \v\f ").empty());
  EXPECT_EQ(internal::split_whitespace("a"), (std::vector<std::string_view>{"a"}));
}

TEST(Join, AtMostMaxItems) {  // checkpoint/'s unmatched keys, one a line
  const std::vector<std::string> keys = {"a", "b", "c", "d", "e"};
  EXPECT_EQ(join(keys, {.separator = "\n  ", .max_items = 2}), "a\n  b\n  ... and 3 more");
  EXPECT_EQ(join(keys, {.separator = "\n  ", .max_items = 5}), "a\n  b\n  c\n  d\n  e");
  // Cut short, the last shown item is not the last item: no last separator.
  EXPECT_EQ(join(std::vector<int>{1, 2, 3}, {.last_separator = " and ", .max_items = 2}), "1, 2, ... and 1 more");
}

}  // namespace
}  // namespace chorus
