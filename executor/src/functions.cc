// The analytic test functions behind "function" trials, their catalogue, parameter checks and
// the synthetic learning curve used to exercise early stopping without training anything.
// The catalogue is built once on first use (a thread-safe function-local static) and never
// changes; every other function is pure, so all of this is safe from any number of threads.
#include "executor/functions.h"

#include "base/hash.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <numbers>
#include <optional>
#include <set>

namespace sweep::executor {
namespace {

using Point = std::vector<double>;
using Evaluator = double (*)(const Point&);

// Input names are x1..x9999999; more digits than that would overflow nothing but make no sense.
constexpr size_t kMaxIndexDigits = 7;

double Branin(const Point& x) {
  constexpr double kPi = std::numbers::pi;
  constexpr double kB = 5.1 / (4 * kPi * kPi);
  constexpr double kC = 5 / kPi;
  constexpr double kT = 1 / (8 * kPi);
  const double inner = x[1] - kB * x[0] * x[0] + kC * x[0] - 6;
  return inner * inner + 10 * (1 - kT) * std::cos(x[0]) + 10;
}

double Rosenbrock(const Point& x) {
  double sum = 0;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    const double a = x[i + 1] - x[i] * x[i];
    const double b = 1 - x[i];
    sum += 100 * a * a + b * b;
  }
  return sum;
}

// Constants as published by Hartmann (1973) and used by every HPO benchmark suite since.
double Hartmann6(const Point& x) {
  static constexpr std::array<double, 4> kAlpha = {1.0, 1.2, 3.0, 3.2};
  static constexpr std::array<std::array<double, 6>, 4> kA = {{
      {10, 3, 17, 3.5, 1.7, 8},
      {0.05, 10, 17, 0.1, 8, 14},
      {3, 3.5, 1.7, 10, 17, 8},
      {17, 8, 0.05, 10, 0.1, 14},
  }};
  static constexpr std::array<std::array<double, 6>, 4> kP = {{
      {1312, 1696, 5569, 124, 8283, 5886},
      {2329, 4135, 8307, 3736, 1004, 9991},
      {2348, 1451, 3522, 2883, 3047, 6650},
      {4047, 8828, 8732, 5743, 1091, 381},
  }};
  double sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    double exponent = 0;
    for (size_t j = 0; j < 6; ++j) {
      const double d = x[j] - 1e-4 * kP[i][j];
      exponent += kA[i][j] * d * d;
    }
    sum += kAlpha[i] * std::exp(-exponent);
  }
  return -sum;
}

double Sphere(const Point& x) {
  double sum = 0;
  for (double v : x) sum += v * v;
  return sum;
}

double Ackley(const Point& x) {
  const double n = static_cast<double>(x.size());
  double squares = 0;
  double cosines = 0;
  for (double v : x) {
    squares += v * v;
    cosines += std::cos(2 * std::numbers::pi * v);
  }
  return -20 * std::exp(-0.2 * std::sqrt(squares / n)) - std::exp(cosines / n) + 20 +
         std::numbers::e;
}

// Hartmann's 3-D function, with the constants of the same 1973 table as Hartmann6.
double Hartmann3(const Point& x) {
  static constexpr std::array<double, 4> kAlpha = {1.0, 1.2, 3.0, 3.2};
  static constexpr std::array<std::array<double, 3>, 4> kA = {{
      {3, 10, 30},
      {0.1, 10, 35},
      {3, 10, 30},
      {0.1, 10, 35},
  }};
  static constexpr std::array<std::array<double, 3>, 4> kP = {{
      {3689, 1170, 2673},
      {4699, 4387, 7470},
      {1091, 8732, 5547},
      {381, 5743, 8828},
  }};
  double sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    double exponent = 0;
    for (size_t j = 0; j < 3; ++j) {
      const double d = x[j] - 1e-4 * kP[i][j];
      exponent += kA[i][j] * d * d;
    }
    sum += kAlpha[i] * std::exp(-exponent);
  }
  return -sum;
}

// Levy, on w = 1 + (x - 1) / 4, as in the Virtual Library of Simulation Experiments.
double Levy(const Point& x) {
  constexpr double kPi = std::numbers::pi;
  auto w = [&x](size_t i) { return 1 + (x[i] - 1) / 4; };
  const double first = std::sin(kPi * w(0));
  double sum = first * first;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    const double s = std::sin(kPi * w(i) + 1);
    sum += (w(i) - 1) * (w(i) - 1) * (1 + 10 * s * s);
  }
  const double last = w(x.size() - 1);
  const double s = std::sin(2 * kPi * last);
  return sum + (last - 1) * (last - 1) * (1 + s * s);
}

double StyblinskiTang(const Point& x) {
  double sum = 0;
  for (double v : x) sum += v * v * v * v - 16 * v * v + 5 * v;
  return sum / 2;
}

struct Entry {
  FunctionInfo info;
  Evaluator evaluate;
};

const std::vector<Entry>& Catalogue() {
  static const std::vector<Entry> kEntries = {
      {{"branin",
        2,
        {{-5, 10}, {0, 15}},
        5 / (4 * std::numbers::pi),
        "Branin-Hoo, 2-D; three global minima at (-pi, 12.275), (pi, 2.275), (9.42478, 2.475)",
        false},
       Branin},
      {{"rosenbrock",
        0,
        {{-5, 10}},
        0,
        "Rosenbrock's valley, n-D (n >= 2); minimum 0 at (1, ..., 1) at the end of a long, flat "
        "curved valley",
        false},
       Rosenbrock},
      {{"hartmann6", 6, std::vector<std::pair<double, double>>(6, {0, 1}), -3.32236801141551,
        "Hartmann 6-D; six local minima, global minimum at (0.20169, 0.150011, 0.476874, "
        "0.275332, 0.311652, 0.6573)",
        false},
       Hartmann6},
      {{"sphere",
        0,
        {{-5.12, 5.12}},
        0,
        "Sphere, n-D (n >= 2): the sum of squares; minimum 0 at 0",
        false},
       Sphere},
      {{"ackley",
        0,
        {{-32.768, 32.768}},
        0,
        "Ackley, n-D (n >= 2); many regular local minima around a global minimum 0 at 0",
        false},
       Ackley},
      {{"hartmann3", 3, std::vector<std::pair<double, double>>(3, {0, 1}), -3.8627797873327,
        "Hartmann 3-D; four local minima, global minimum at (0.114614, 0.555649, 0.852547)", false},
       Hartmann3},
      {{"levy",
        0,
        {{-10, 10}},
        0,
        "Levy, n-D (n >= 2); many local minima, global minimum 0 at (1, ..., 1)",
        false},
       Levy},
      {{"styblinski_tang",
        0,
        {{-5, 5}},
        -39.16616570377142,
        "Styblinski-Tang, n-D (n >= 2); minimum -39.16617 * n at (-2.903534, ..., -2.903534)",
        true},
       StyblinskiTang},
  };
  return kEntries;
}

const Entry* FindEntry(std::string_view name) {
  for (const Entry& entry : Catalogue()) {
    if (entry.info.name == name) return &entry;
  }
  return nullptr;
}

// "x7" -> 7; nullopt for anything else, "x0" and "x07" included, so each input has one name.
std::optional<int> InputIndex(std::string_view name) {
  if (name.size() < 2 || name.size() > 1 + kMaxIndexDigits || name[0] != 'x' || name[1] == '0') {
    return std::nullopt;
  }
  int index = 0;
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(name.data() + 1, end, index);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return index;
}

std::string Expected(const FunctionInfo& info) {
  // Appended rather than "literal" + std::string, on which GCC 12 -O3 warns falsely (-Wrestrict).
  std::string text = info.dims == 0 ? "x1..xn, n >= " : "x1..x";
  text += std::to_string(info.dims == 0 ? kMinAnyDims : info.dims);
  return text;
}

// JSON text for an error message; never throws, even on a string that is not UTF-8.
std::string Show(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

const std::vector<FunctionInfo>& Functions() {
  static const std::vector<FunctionInfo> kInfos = [] {
    std::vector<FunctionInfo> infos;
    for (const Entry& entry : Catalogue()) infos.push_back(entry.info);
    return infos;
  }();
  return kInfos;
}

const FunctionInfo* FindFunction(std::string_view name) {
  for (const FunctionInfo& info : Functions()) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

std::pair<double, double> DomainOf(const FunctionInfo& info, int index) {
  if (info.domain.empty()) return {0, 0};
  if (info.domain.size() == 1 || index < 1) return info.domain.front();
  return info.domain[std::min(static_cast<size_t>(index), info.domain.size()) - 1];
}

double MinimumOf(const FunctionInfo& info, int dims) {
  return info.minimum_per_input ? info.minimum * dims : info.minimum;
}

Status CheckFunctionParams(const FunctionInfo& info, const std::vector<std::string>& param_names) {
  std::set<int> seen;
  int highest = 0;
  for (const std::string& name : param_names) {
    std::optional<int> index = InputIndex(name);
    if (!index || (info.dims > 0 && *index > info.dims)) {
      return Status::InvalidArgument(info.name + ": unexpected parameter '" + name + "' (expects " +
                                     Expected(info) + ")");
    }
    if (!seen.insert(*index).second) {
      return Status::InvalidArgument(info.name + ": parameter '" + name + "' given twice");
    }
    highest = std::max(highest, *index);
  }
  const int n = info.dims > 0 ? info.dims : std::max(highest, kMinAnyDims);
  for (int i = 1; i <= n; ++i) {
    if (!seen.contains(i)) {
      return Status::InvalidArgument(info.name + ": missing parameter 'x" + std::to_string(i) +
                                     "' (expects " + Expected(info) + ")");
    }
  }
  return Status::Ok();
}

Result<double> EvaluateFunction(std::string_view name, const nlohmann::json& params) {
  const Entry* entry = FindEntry(name);
  if (entry == nullptr) {
    std::string known;
    for (const Entry& e : Catalogue()) known += (known.empty() ? "" : ", ") + e.info.name;
    std::string message = "unknown function '";
    message += name;
    message += "' (known: " + known + ")";
    return Status::NotFound(message);
  }
  const FunctionInfo& info = entry->info;
  if (!params.is_object()) {
    return Status::InvalidArgument(info.name + ": parameters must be a JSON object, got " +
                                   Show(params));
  }
  std::vector<std::string> names;
  for (const auto& [key, value] : params.items()) names.push_back(key);
  SWEEP_RETURN_IF_ERROR(CheckFunctionParams(info, names));

  Point x(params.size());
  for (const auto& [key, value] : params.items()) {
    // Booleans are not numbers in nlohmann::json, so true cannot pass for 1.
    if (!value.is_number()) {
      return Status::InvalidArgument(info.name + ": parameter '" + key +
                                     "' must be a number, got " + Show(value));
    }
    const double v = value.get<double>();
    if (!std::isfinite(v)) {
      return Status::InvalidArgument(info.name + ": parameter '" + key + "' must be finite");
    }
    x[static_cast<size_t>(*InputIndex(key) - 1)] = v;
  }
  const double result = entry->evaluate(x);
  // Far outside the domain Rosenbrock overflows; inf would not survive a JSON round trip.
  if (!std::isfinite(result)) {
    return Status::InvalidArgument(info.name + ": value overflows at " + Show(params));
  }
  return result;
}

double CurveValue(double final_value, double minimum, const nlohmann::json& params, int64_t step,
                  int64_t steps) {
  if (steps <= 1 || step >= steps || !std::isfinite(final_value)) return final_value;
  step = std::max<int64_t>(step, 1);

  // Two independent draws from the params: the curve's steepness and its height.
  const uint64_t h = SplitMix64(Fnv1a64(Show(params)));
  const double alpha = 0.5 + UnitInterval(h);                    // power-law exponent
  const double ratio = 0.5 + 1.5 * UnitInterval(SplitMix64(h));  // gap per unit of distance

  // The gap grows with how far the final value is from the optimum, so early values rank
  // trials roughly as final ones do; the floor keeps even the optimum's curve from being flat.
  const double distance = std::isfinite(minimum) ? std::fabs(final_value - minimum) : 0;
  const double floor = 0.01 * (1 + (std::isfinite(minimum) ? std::fabs(minimum) : 0));
  const double gap = ratio * (distance + floor);
  if (!std::isfinite(gap)) return final_value;  // values near DBL_MAX: a flat curve, not inf

  // shape(1) = 1, shape(steps) = 0, decreasing in between like t^-alpha: fast early progress
  // and a long tail, as real training curves have.
  const double end = std::pow(static_cast<double>(steps), -alpha);
  const double shape = (std::pow(static_cast<double>(step), -alpha) - end) / (1 - end);
  return final_value + gap * shape;
}

}  // namespace sweep::executor
