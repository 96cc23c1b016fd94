// Terminal width and braille line charts.
#include "report/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace sweep::report {

namespace {

// The terminal's size on `fd` in one dimension, else the environment variable's, else `dflt`.
int TerminalSize(int fd, bool columns, const char* variable, int dflt) {
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0) {
    const int n = columns ? ws.ws_col : ws.ws_row;
    if (n > 0) return n;
  }
  if (const char* text = std::getenv(variable)) {
    char* end = nullptr;
    long v = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && v > 0 && v < 100000) return static_cast<int>(v);
  }
  return dflt;
}

}  // namespace

int TerminalColumns(int fd) { return TerminalSize(fd, true, "COLUMNS", 80); }

int TerminalRows(int fd) { return TerminalSize(fd, false, "LINES", 24); }

size_t DisplayWidth(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::string ClipColumns(const std::string& text, size_t columns) {
  std::string out;
  size_t w = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) {
      if (w == columns) break;
      ++w;
    }
    out += text[i];
  }
  return out;
}

std::string ShortNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

namespace {

// A canvas of braille cells, 2 dots wide and 4 high each.
class BrailleCanvas {
 public:
  BrailleCanvas(int columns, int rows) : columns_(columns), rows_(rows), cells_(columns * rows) {}
  int dot_columns() const { return columns_ * 2; }
  int dot_rows() const { return rows_ * 4; }

  void Set(int x, int y) {
    if (x < 0 || y < 0 || x >= dot_columns() || y >= dot_rows()) return;
    // Bit of each dot: left column top to bottom, then right column.
    static constexpr unsigned char kBits[2][4] = {{0x01, 0x02, 0x04, 0x40},
                                                  {0x08, 0x10, 0x20, 0x80}};
    cells_[(y / 4) * columns_ + x / 2] |= kBits[x % 2][y % 4];
  }

  void Line(int x0, int y0, int x1, int y1) {  // Bresenham
    int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
    int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    while (true) {
      Set(x0, y0);
      if (x0 == x1 && y0 == y1) break;
      int e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }

  std::string Row(int row) const {
    std::string out;
    for (int c = 0; c < columns_; ++c) {
      const unsigned cp = 0x2800 + cells_[row * columns_ + c];
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return out;
  }

 private:
  int columns_, rows_;
  std::vector<unsigned char> cells_;
};

std::string PadLeft(const std::string& s, size_t width) {
  size_t w = DisplayWidth(s);
  return w >= width ? s : std::string(width - w, ' ') + s;
}

std::string Clip(const std::string& s, size_t width) { return ClipColumns(s, width); }

}  // namespace

std::string LineChart(const std::vector<std::pair<double, double>>& points,
                      const LineChartOptions& options) {
  const int width = std::max(options.width, 20);
  const int height = std::max(options.height, 1);
  double xmin = 0, xmax = 0, ymin = 0, ymax = 0;
  bool any = false;
  for (const auto& [x, y] : points) {
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    if (!any) {
      xmin = xmax = x;
      ymin = ymax = y;
      any = true;
    }
    xmin = std::min(xmin, x);
    xmax = std::max(xmax, x);
    ymin = std::min(ymin, y);
    ymax = std::max(ymax, y);
  }
  std::string out = Clip(options.title, width) + "\n";
  if (!any) return out + Clip("  (no values)", width) + "\n";

  const std::string top = ShortNumber(ymax), bottom = ShortNumber(ymin);
  const size_t label = std::max(DisplayWidth(top), DisplayWidth(bottom));
  const int plot = std::max(4, width - static_cast<int>(label) - 2);
  BrailleCanvas canvas(plot, height);
  auto dot_x = [&](double x) {
    if (!(xmax > xmin)) return canvas.dot_columns() / 2;
    return static_cast<int>(std::lround((x - xmin) / (xmax - xmin) * (canvas.dot_columns() - 1)));
  };
  auto dot_y = [&](double y) {
    if (!(ymax > ymin)) return canvas.dot_rows() / 2;
    return static_cast<int>(std::lround((ymax - y) / (ymax - ymin) * (canvas.dot_rows() - 1)));
  };
  bool have_last = false;
  int lx = 0, ly = 0;
  for (const auto& [x, y] : points) {
    if (!std::isfinite(x) || !std::isfinite(y)) {
      have_last = false;  // a gap in the curve
      continue;
    }
    const int px = dot_x(x), py = dot_y(y);
    if (have_last) {
      canvas.Line(lx, ly, px, py);
    } else {
      canvas.Set(px, py);
    }
    lx = px;
    ly = py;
    have_last = true;
  }
  for (int r = 0; r < height; ++r) {
    std::string y_label = r == 0 ? top : (r == height - 1 ? bottom : "");
    if (height == 1) y_label = top;
    const char* tick = (r == 0 || r == height - 1) ? " ┤" : " │";
    out += Clip(PadLeft(y_label, label) + tick + canvas.Row(r), width) + "\n";
  }
  // The x axis: first x under the left edge, last under the right, the axis name between.
  const std::string left = ShortNumber(xmin), right = ShortNumber(xmax);
  std::string axis = left;
  const size_t room = static_cast<size_t>(plot);
  const size_t used = DisplayWidth(left) + DisplayWidth(right);
  if (room > used + 2) {
    const size_t gap = room - used;
    std::string name = options.x_label.empty() ? "" : " " + options.x_label + " ";
    if (DisplayWidth(name) > gap) name.clear();
    const size_t before = (gap - DisplayWidth(name)) / 2;
    axis += std::string(before, ' ') + name + std::string(gap - before - DisplayWidth(name), ' ') +
            right;
  } else {
    axis += " " + right;
  }
  out += Clip(std::string(label + 2, ' ') + axis, width) + "\n";
  return out;
}

}  // namespace sweep::report
