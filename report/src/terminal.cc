// Terminal width and braille line charts.
#include "report/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string_view>
#include <utility>

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

namespace {

// East Asian wide and fullwidth characters, and the emoji terminals draw two columns wide
// (Unicode's EastAsianWidth W and F), as [first, last] ranges in order.
constexpr std::pair<char32_t, char32_t> kWide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},   {0x23E9, 0x23EC},
    {0x23F0, 0x23F0},   {0x23F3, 0x23F3},   {0x25FD, 0x25FE},   {0x2614, 0x2615},
    {0x2648, 0x2653},   {0x267F, 0x267F},   {0x2693, 0x2693},   {0x26A1, 0x26A1},
    {0x26AA, 0x26AB},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},   {0x26CE, 0x26CE},
    {0x26D4, 0x26D4},   {0x26EA, 0x26EA},   {0x26F2, 0x26F3},   {0x26F5, 0x26F5},
    {0x26FA, 0x26FA},   {0x26FD, 0x26FD},   {0x2705, 0x2705},   {0x270A, 0x270B},
    {0x2728, 0x2728},   {0x274C, 0x274C},   {0x274E, 0x274E},   {0x2753, 0x2755},
    {0x2757, 0x2757},   {0x2795, 0x2797},   {0x27B0, 0x27B0},   {0x27BF, 0x27BF},
    {0x2B1B, 0x2B1C},   {0x2B50, 0x2B50},   {0x2B55, 0x2B55},   {0x2E80, 0x303E},
    {0x3041, 0x33FF},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
    {0xA960, 0xA97F},   {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE10, 0xFE19},
    {0xFE30, 0xFE6F},   {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x16FE0, 0x16FE4},
    {0x17000, 0x18CFF}, {0x1B000, 0x1B2FF}, {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF},
    {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F200, 0x1F251}, {0x1F300, 0x1F320},
    {0x1F32D, 0x1F335}, {0x1F337, 0x1F37C}, {0x1F37E, 0x1F393}, {0x1F3A0, 0x1F3CA},
    {0x1F3CF, 0x1F3D3}, {0x1F3E0, 0x1F3F0}, {0x1F3F4, 0x1F3F4}, {0x1F3F8, 0x1F43E},
    {0x1F440, 0x1F440}, {0x1F442, 0x1F4FC}, {0x1F4FF, 0x1F53D}, {0x1F54B, 0x1F54E},
    {0x1F550, 0x1F567}, {0x1F57A, 0x1F57A}, {0x1F595, 0x1F596}, {0x1F5A4, 0x1F5A4},
    {0x1F5FB, 0x1F64F}, {0x1F680, 0x1F6C5}, {0x1F6CC, 0x1F6CC}, {0x1F6D0, 0x1F6D2},
    {0x1F6D5, 0x1F6D7}, {0x1F6DC, 0x1F6DF}, {0x1F6EB, 0x1F6EC}, {0x1F6F4, 0x1F6FC},
    {0x1F7E0, 0x1F7EB}, {0x1F7F0, 0x1F7F0}, {0x1F90C, 0x1F93A}, {0x1F93C, 0x1F945},
    {0x1F947, 0x1F9FF}, {0x1FA70, 0x1FAFF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

// Characters drawn over the one before (combining marks), and the invisible joiners and
// variation selectors: no column of their own.
constexpr std::pair<char32_t, char32_t> kZero[] = {
    {0x0300, 0x036F}, {0x0483, 0x0489},   {0x0591, 0x05BD}, {0x0610, 0x061A}, {0x064B, 0x065F},
    {0x0E31, 0x0E31}, {0x0E34, 0x0E3A},   {0x0E47, 0x0E4E}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF},
    {0x200B, 0x200F}, {0x2060, 0x2064},   {0x20D0, 0x20FF}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F},
    {0xFEFF, 0xFEFF}, {0xE0100, 0xE01EF},
};

template <size_t N>
bool In(const std::pair<char32_t, char32_t> (&ranges)[N], char32_t c) {
  const auto* it = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                                    [](char32_t v, const auto& r) { return v < r.first; });
  return it != std::begin(ranges) && c <= (it - 1)->second;
}

// The code point starting at text[i] and its length in bytes; a byte that starts no valid
// sequence is one character of its own (shown as one column, as a replacement character).
std::pair<char32_t, size_t> Decode(const std::string& text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + len > text.size()) return {0xFFFD, 1};
  char32_t cp = len == 1 ? c : c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if ((b & 0xC0) != 0x80) return {0xFFFD, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, len};
}

size_t Columns(char32_t c) {
  if (In(kZero, c)) return 0;
  return In(kWide, c) ? 2 : 1;
}

}  // namespace

size_t DisplayWidth(const std::string& text) {
  size_t n = 0;
  for (size_t i = 0; i < text.size();) {
    const auto [cp, len] = Decode(text, i);
    n += Columns(cp);
    i += len;
  }
  return n;
}

std::string ClipColumns(const std::string& text, size_t columns) {
  size_t w = 0;
  size_t i = 0;
  while (i < text.size()) {
    const auto [cp, len] = Decode(text, i);
    const size_t cw = Columns(cp);
    if (w + cw > columns) break;  // a wide character that would not fit whole is left out
    w += cw;
    i += len;
  }
  return text.substr(0, i);
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
  // Where v lies between lo and hi, 0 to 1, in long double: hi - lo of doubles near the
  // largest ones (1e308 and -1e308) would overflow to infinity.
  auto fraction = [](double v, double lo, double hi) {
    return static_cast<double>((static_cast<long double>(v) - lo) /
                               (static_cast<long double>(hi) - lo));
  };
  auto dot_x = [&](double x) {
    if (!(xmax > xmin)) return canvas.dot_columns() / 2;
    return static_cast<int>(std::lround(fraction(x, xmin, xmax) * (canvas.dot_columns() - 1)));
  };
  auto dot_y = [&](double y) {
    if (!(ymax > ymin)) return canvas.dot_rows() / 2;
    return static_cast<int>(std::lround((1 - fraction(y, ymin, ymax)) * (canvas.dot_rows() - 1)));
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
