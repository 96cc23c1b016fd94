// Tests for the braille line charts and the terminal width.
#include "report/terminal.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <sstream>

namespace sweep::report {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// The braille cells of a chart row (after the "label ┤" or "│" prefix).
std::vector<unsigned> Cells(const std::string& row) {
  std::vector<unsigned> cells;
  for (size_t i = 0; i + 2 < row.size(); ++i) {
    const unsigned char a = row[i], b = row[i + 1], c = row[i + 2];
    if (a == 0xE2 && (b & 0xFC) == 0xA0) {
      cells.push_back(((b & 0x03u) << 6) | (c & 0x3Fu));
      i += 2;
    }
  }
  return cells;
}

TEST(LineChartTest, FitsEveryWidthAndLabelsTheRange) {
  std::vector<std::pair<double, double>> points;
  for (int i = 1; i <= 30; ++i) points.emplace_back(i, 0.5 + 0.01 * i);
  for (int width : {20, 33, 60, 80, 200}) {
    LineChartOptions o;
    o.width = width;
    o.height = 4;
    o.title = "val_acc";
    o.x_label = "epoch";
    std::vector<std::string> lines = Lines(LineChart(points, o));
    ASSERT_EQ(lines.size(), 6u) << width;  // title, 4 rows, x axis
    for (const std::string& line : lines) EXPECT_LE(DisplayWidth(line), size_t(width)) << line;
    EXPECT_EQ(lines[0], "val_acc");
    EXPECT_EQ(lines[1].rfind(" 0.8 ┤", 0), 0u) << lines[1];
    EXPECT_EQ(lines[4].rfind("0.51 ┤", 0), 0u) << lines[4];
    EXPECT_NE(lines[5].find("1"), std::string::npos);
    EXPECT_NE(lines[5].find("30"), std::string::npos);
    if (width >= 60) {
      EXPECT_NE(lines[5].find("epoch"), std::string::npos);
      EXPECT_EQ(DisplayWidth(lines[1]), size_t(width));
    }
  }
}

TEST(LineChartTest, ARisingLineGoesFromBottomLeftToTopRight) {
  LineChartOptions o;
  o.width = 40;
  o.height = 3;
  std::vector<std::string> lines = Lines(LineChart({{0, 0}, {1, 1}}, o));
  ASSERT_EQ(lines.size(), 5u);
  std::vector<unsigned> top = Cells(lines[1]), bottom = Cells(lines[3]);
  ASSERT_FALSE(top.empty());
  ASSERT_EQ(top.size(), bottom.size());
  EXPECT_NE(top.back() & 0x08u, 0u);      // top-right dot of the last cell
  EXPECT_NE(bottom.front() & 0x40u, 0u);  // bottom-left dot of the first cell
  EXPECT_EQ(top.front(), 0u);
  EXPECT_EQ(bottom.back(), 0u);
  // Every column of dots is drawn: the line has no gap.
  for (size_t c = 0; c < top.size(); ++c) {
    unsigned any = top[c] | Cells(lines[2])[c] | bottom[c];
    EXPECT_NE(any, 0u) << "column " << c;
  }
}

// Values near the largest doubles: their range (2e308) is not a double, and the line still runs
// from bottom left to top right instead of lying flat on the top row.
TEST(LineChartTest, HugeRangesAreDrawnToScale) {
  LineChartOptions o;
  o.width = 40;
  o.height = 3;
  std::vector<std::string> lines = Lines(LineChart({{0, -1e308}, {1, 1.7976931348623157e308}}, o));
  ASSERT_EQ(lines.size(), 5u);
  std::vector<unsigned> top = Cells(lines[1]), bottom = Cells(lines[3]);
  ASSERT_FALSE(top.empty());
  EXPECT_NE(top.back() & 0x08u, 0u);
  EXPECT_NE(bottom.front() & 0x40u, 0u);
  EXPECT_EQ(top.front(), 0u);
}

TEST(LineChartTest, FlatAndEmptyCurves) {
  LineChartOptions o;
  o.width = 30;
  o.height = 4;
  o.title = "lr";
  std::vector<std::string> flat = Lines(LineChart({{1, 0.05}, {2, 0.05}, {3, 0.05}}, o));
  ASSERT_EQ(flat.size(), 6u);
  EXPECT_TRUE(Cells(flat[1]) == std::vector<unsigned>(Cells(flat[1]).size(), 0u));
  unsigned middle = 0;
  for (unsigned c : Cells(flat[3])) middle |= c;  // dot row 8 of 16: the third row's first dot
  EXPECT_NE(middle, 0u);
  std::vector<std::string> none = Lines(LineChart({}, o));
  EXPECT_EQ(none, (std::vector<std::string>{"lr", "  (no values)"}));
}

TEST(TerminalTest, WidthFromColumnsThenDefault) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);  // not a terminal
  ::setenv("COLUMNS", "123", 1);
  EXPECT_EQ(TerminalColumns(fds[0]), 123);
  ::setenv("COLUMNS", "wide", 1);
  EXPECT_EQ(TerminalColumns(fds[0]), 80);
  ::unsetenv("COLUMNS");
  EXPECT_EQ(TerminalColumns(fds[0]), 80);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(TerminalTest, ShortNumbersAndClipping) {
  EXPECT_EQ(ShortNumber(0.87771234), "0.8777");
  EXPECT_EQ(ShortNumber(27), "27");
  EXPECT_EQ(ShortNumber(1.2e-5), "1.2e-05");
  EXPECT_EQ(ShortNumber(0), "0");
  EXPECT_EQ(ClipColumns("ab⣿⣿cd", 4), "ab⣿⣿");
  EXPECT_EQ(DisplayWidth("ab⣿⣿"), 4u);
}

// Wide characters take two columns, and clipping never splits one; combining marks take none.
TEST(TerminalTest, WideCharactersTakeTwoColumns) {
  EXPECT_EQ(DisplayWidth("学习率"), 6u);
  EXPECT_EQ(DisplayWidth("lr=学习"), 7u);
  EXPECT_EQ(DisplayWidth("🚀 go"), 5u);
  EXPECT_EQ(DisplayWidth("e\u0301"), 1u);  // e and a combining acute accent
  EXPECT_EQ(ClipColumns("学习率", 5), "学习");
  EXPECT_EQ(ClipColumns("a学b", 2), "a");
  EXPECT_EQ(ClipColumns("a学b", 3), "a学");
  EXPECT_EQ(DisplayWidth("\xff\xfe"), 2u);  // not UTF-8: a column per byte
  EXPECT_EQ(ClipColumns("\xff"
                        "ab",
                        2),
            "\xff"
            "a");
}

}  // namespace
}  // namespace sweep::report
