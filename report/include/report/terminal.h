// Drawing in a terminal: its width, and compact line charts in Unicode braille (each character
// cell holds 2 x 4 dots), for `sweep show`. Pure apart from TerminalColumns, which asks the
// terminal; safe from any thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace sweep::report {

// The width of the terminal on `fd` (ioctl TIOCGWINSZ), else $COLUMNS, else 80.
int TerminalColumns(int fd);
// Its height (ioctl TIOCGWINSZ), else $LINES, else 24.
int TerminalRows(int fd);

struct LineChartOptions {
  int width = 80;  // columns of the whole chart, labels included (at least 20)
  int height = 4;  // character rows of the plot area (4 dots each)
  std::string title;
  std::string x_label;  // e.g. "epoch"
};

// A line chart of `points` (x, y), sorted by x: a title line, `height` rows of braille with
// the y maximum labelled on the top row and the minimum on the bottom row, and an x axis line
// with the first and last x under the plot's left and right edges. Every line is at most
// `width` columns. A single point, or a flat line, sits mid-height. Lines end with '\n'.
std::string LineChart(const std::vector<std::pair<double, double>>& points,
                      const LineChartOptions& options);

// Columns a UTF-8 string takes in a terminal: East Asian wide characters and most emoji take
// two, combining marks none, every other character one.
size_t DisplayWidth(const std::string& text);

// The first `columns` columns of a UTF-8 string.
std::string ClipColumns(const std::string& text, size_t columns);

// Short readable number: up to 4 significant digits ("0.8777", "1.2e-05", "27").
std::string ShortNumber(double v);

}  // namespace sweep::report
