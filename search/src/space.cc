// Validation of parameters (distributions and conditions) and the SearchSpace that holds them.
// Everything here is a pure function of its arguments; a SearchSpace is a plain value that
// its owner mutates through Add and must not share across threads while doing so.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "search/space.h"

namespace sweep::search {
namespace {

using Kind = Distribution::Kind;

// Integer bounds travel as doubles; beyond 2^53 a double no longer holds every integer, so a
// bound there would silently change value on its way to the sampler.
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

// Shortest text that reads back as the same double, so "got 0.001" shows what the user wrote
// rather than "0.0010000000000000000208".
std::string FormatNumber(double x) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), x);
  if (ec != std::errc()) return std::to_string(x);
  return std::string(buffer, end);
}

bool IsContinuous(Kind kind) { return kind == Kind::kUniform || kind == Kind::kLogUniform; }
bool IsInteger(Kind kind) { return kind == Kind::kIntUniform || kind == Kind::kLogIntUniform; }

Status ValidateRange(const std::string& name, Kind kind, double min, double max) {
  const std::string prefix = name + ": " + std::string(KindName(kind));
  std::string got = "(got min=";
  got += FormatNumber(min) + ", max=" + FormatNumber(max) + ")";
  if (!std::isfinite(min) || !std::isfinite(max)) {
    return Status::InvalidArgument(prefix + " bounds must be finite " + got);
  }
  if (IsInteger(kind)) {
    if (min != std::floor(min) || max != std::floor(max)) {
      return Status::InvalidArgument(prefix + " bounds must be integers " + got);
    }
    if (std::fabs(min) > kMaxExactInteger || std::fabs(max) > kMaxExactInteger) {
      return Status::InvalidArgument(prefix + " bounds must lie within +-2^53 " + got);
    }
  }
  if (min > max) return Status::InvalidArgument(prefix + " needs min <= max " + got);
  if (IsContinuous(kind) && min == max) {
    return Status::InvalidArgument(prefix + " has an empty range (min == max == " +
                                   FormatNumber(min) + "); use a constant instead");
  }
  if (kind == Kind::kLogUniform && min <= 0) {
    return Status::InvalidArgument(prefix + " needs min > 0 (got " + FormatNumber(min) + ")");
  }
  if (kind == Kind::kLogIntUniform && min < 1) {
    return Status::InvalidArgument(prefix + " needs min >= 1 (got " + FormatNumber(min) + ")");
  }
  // The random sampler scales by max - min; a width that overflows would give inf or nan.
  if (kind == Kind::kUniform && !std::isfinite(max - min)) {
    return Status::InvalidArgument(prefix + " range is too wide (max - min overflows) " + got);
  }
  return Status::Ok();
}

// A step divides max - min into whole steps (within 1e-9 of one: 1 / 0.1 is 10.000000000000002),
// and leaves at most 2^53 values, each exactly a double's worth of index.
Status ValidateStep(const std::string& name, const Distribution& d) {
  if (d.step == 0) return Status::Ok();
  const std::string prefix = name + ": " + std::string(KindName(d.kind));
  if (d.kind != Kind::kUniform && d.kind != Kind::kIntUniform) {
    return Status::InvalidArgument(prefix +
                                   " takes no step; a step applies to uniform and int_uniform");
  }
  if (!std::isfinite(d.step) || d.step < 0) {
    return Status::InvalidArgument(prefix + " needs step > 0 (got " + FormatNumber(d.step) + ")");
  }
  if (d.kind == Kind::kIntUniform && d.step != std::floor(d.step)) {
    return Status::InvalidArgument(prefix + " needs an integer step (got " + FormatNumber(d.step) +
                                   ")");
  }
  const double steps = (d.max - d.min) / d.step;
  const double whole = std::round(steps);
  if (!(whole < kMaxExactInteger)) {
    return Status::InvalidArgument(prefix + " has more than 2^53 steps of " + FormatNumber(d.step) +
                                   " between min and max");
  }
  if (steps > 0 && steps < 1 - 1e-9) {
    return Status::InvalidArgument(prefix + ": the step (" + FormatNumber(d.step) +
                                   ") is larger than max - min (" + FormatNumber(d.max - d.min) +
                                   "); use a smaller step");
  }
  // Integers exactly; reals within the rounding of (max - min) / step, which grows with the
  // number of steps, but never by as much as a step's 1e-9 past a few million steps.
  const bool divides = d.kind == Kind::kIntUniform
                           ? (static_cast<int64_t>(d.max) - static_cast<int64_t>(d.min)) %
                                     static_cast<int64_t>(d.step) ==
                                 0
                           : std::fabs(steps - whole) <=
                                 std::max(1e-9, 8 * std::numeric_limits<double>::epsilon() * whole);
  if (!divides) {
    const std::string last = StepValue(d, static_cast<int64_t>(std::floor(steps))).dump();
    return Status::InvalidArgument(prefix + ": max - min (" + FormatNumber(d.max - d.min) +
                                   ") is not a whole number of steps of " + FormatNumber(d.step) +
                                   "; the last value would be " + last + ", so set max = " + last +
                                   " or change the step");
  }
  return Status::Ok();
}

Status ValidateDistribution(const Parameter& parameter) {
  const std::string& name = parameter.name;
  const Distribution& d = parameter.distribution;
  switch (d.kind) {
    case Kind::kConstant:
      if (d.values.size() != 1) {
        return Status::InvalidArgument(name + ": constant needs exactly one value (got " +
                                       std::to_string(d.values.size()) + ")");
      }
      return Status::Ok();
    case Kind::kCategorical:
      if (d.values.empty()) {
        return Status::InvalidArgument(name + ": categorical needs at least one value");
      }
      return Status::Ok();
    case Kind::kUniform:
    case Kind::kLogUniform:
    case Kind::kIntUniform:
    case Kind::kLogIntUniform:
      SWEEP_RETURN_IF_ERROR(ValidateRange(name, d.kind, d.min, d.max));
      return ValidateStep(name, d);
  }
  return Status::InvalidArgument(name + ": unknown distribution kind " +
                                 std::to_string(static_cast<int>(d.kind)));
}

}  // namespace

int64_t StepCount(const Distribution& d) {
  if (d.step <= 0 || (d.kind != Kind::kUniform && d.kind != Kind::kIntUniform)) return 0;
  if (d.kind == Kind::kIntUniform) {
    return (static_cast<int64_t>(d.max) - static_cast<int64_t>(d.min)) /
               static_cast<int64_t>(d.step) +
           1;
  }
  return static_cast<int64_t>(std::round((d.max - d.min) / d.step)) + 1;
}

nlohmann::json StepValue(const Distribution& d, int64_t k) {
  if (d.kind == Kind::kIntUniform) {
    // Bounds and step are integers within 2^53 (Validate), so this is exact.
    return static_cast<int64_t>(d.min) + k * static_cast<int64_t>(d.step);
  }
  const double exact = d.min + static_cast<double>(k) * d.step;
  // `exact` printed with `format` at `precision`, read back, when within a billionth of a step.
  const auto near = [&](const char* format, int precision) -> std::optional<double> {
    char text[400];  // "%.20f" of 1e300: 301 digits, the point and 20 decimals
    std::snprintf(text, sizeof text, format, precision, exact);
    const double shorter = std::strtod(text, nullptr);
    if (std::fabs(shorter - exact) <= d.step * 1e-9) return shorter;
    return std::nullopt;
  };
  // The fewest decimals first (so -0.3 + 3 * 0.1, which is 5.6e-17, is 0), then the fewest
  // significant digits (a step too fine for 20 decimals, 1e-30).
  std::optional<double> value;
  for (int decimals = 0; decimals <= 20 && !value; ++decimals) value = near("%.*f", decimals);
  for (int digits = 1; digits <= 17 && !value; ++digits) value = near("%.*g", digits);
  const double v = std::clamp(value.value_or(exact), d.min, d.max);
  return v == 0 ? 0.0 : v;  // not -0.0
}

std::string_view KindName(Distribution::Kind kind) {
  switch (kind) {
    case Kind::kConstant:
      return "constant";
    case Kind::kUniform:
      return "uniform";
    case Kind::kLogUniform:
      return "log_uniform";
    case Kind::kIntUniform:
      return "int_uniform";
    case Kind::kLogIntUniform:
      return "log_int_uniform";
    case Kind::kCategorical:
      return "categorical";
  }
  return "unknown";
}

std::optional<Distribution::Kind> KindFromName(std::string_view name) {
  for (Kind kind : {Kind::kConstant, Kind::kUniform, Kind::kLogUniform, Kind::kIntUniform,
                    Kind::kLogIntUniform, Kind::kCategorical}) {
    if (KindName(kind) == name) return kind;
  }
  return std::nullopt;
}

Status Validate(const Parameter& parameter) {
  const std::string& name = parameter.name;
  if (name.empty()) return Status::InvalidArgument("a parameter needs a non-empty name");
  SWEEP_RETURN_IF_ERROR(ValidateDistribution(parameter));
  if (parameter.condition) {
    const Condition& c = *parameter.condition;
    if (c.parent.empty()) {
      return Status::InvalidArgument(name + ": a condition needs the name of its parent");
    }
    if (c.parent == name) {
      return Status::InvalidArgument(name + ": a parameter cannot depend on itself");
    }
    if (c.values.empty()) {
      return Status::InvalidArgument(name + ": condition on '" + c.parent +
                                     "' lists no values, so it could never be active");
    }
  }
  return Status::Ok();
}

const Parameter* SearchSpace::Find(std::string_view name) const {
  for (const Parameter& p : parameters_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Status SearchSpace::Add(Parameter parameter) {
  SWEEP_RETURN_IF_ERROR(Validate(parameter));
  if (Find(parameter.name) != nullptr) {
    return Status::InvalidArgument(parameter.name + ": parameter declared twice");
  }
  if (parameter.condition) {
    // Parents come first: the samplers decide activity in declaration order, and no cycle can
    // form when every edge points backwards.
    const Condition& c = *parameter.condition;
    const Parameter* parent = Find(c.parent);
    if (parent == nullptr) {
      return Status::InvalidArgument(parameter.name + ": condition on '" + c.parent +
                                     "', which is not a parameter declared before it");
    }
    const Distribution& pd = parent->distribution;
    if (pd.kind != Kind::kCategorical && pd.kind != Kind::kConstant) {
      return Status::InvalidArgument(parameter.name + ": condition on '" + c.parent +
                                     "', which is " + std::string(KindName(pd.kind)) +
                                     "; a parent must be categorical (values = [...])");
    }
    for (const nlohmann::json& v : c.values) {
      if (std::find(pd.values.begin(), pd.values.end(), v) == pd.values.end()) {
        return Status::InvalidArgument(parameter.name + ": condition value " + v.dump() +
                                       " is not one of " + c.parent + "'s values " +
                                       nlohmann::json(pd.values).dump());
      }
    }
  }
  parameters_.push_back(std::move(parameter));
  return Status::Ok();
}

std::string PointKey(const nlohmann::json& params) {
  if (!params.is_object()) return params.dump();
  nlohmann::json key = nlohmann::json::object();
  for (const auto& [name, v] : params.items()) {
    if (!v.is_number()) {
      key[name] = v;
      continue;
    }
    // 12 digits: a stepped value computed as min + k * step (0.30000000000000004) is 0.3.
    char text[32];
    std::snprintf(text, sizeof text, "%.12g", v.get<double>());
    key[name] = std::strtod(text, nullptr);
  }
  return key.dump();
}

std::string Outside(const SearchSpace& space, const nlohmann::json& params) {
  if (!params.is_object()) return "its parameters are not an object";
  // As the config would write it: a whole bound of a real range as 0, not 0.0.
  auto show = [](const nlohmann::json& v) {
    if (v.is_number_float() && std::isfinite(v.get<double>()) &&
        v.get<double>() == std::floor(v.get<double>()) && std::abs(v.get<double>()) < 1e15) {
      return std::to_string(static_cast<int64_t>(v.get<double>()));
    }
    return v.dump();
  };
  for (const Parameter& p : space.parameters()) {
    bool active = true;
    if (p.condition) {
      auto parent = params.find(p.condition->parent);
      const auto& values = p.condition->values;
      active = parent != params.end() &&
               std::find(values.begin(), values.end(), *parent) != values.end();
    }
    auto it = params.find(p.name);
    if (!active) {
      if (it != params.end()) return p.name + " is set where this space has it inactive";
      continue;
    }
    if (it == params.end()) return "it has no " + p.name;
    const nlohmann::json& v = *it;
    const Distribution& d = p.distribution;
    switch (d.kind) {
      case Kind::kConstant:
        if (v != d.values[0]) return p.name + " is " + show(v) + ", not " + show(d.values[0]);
        break;
      case Kind::kCategorical:
        if (std::find(d.values.begin(), d.values.end(), v) == d.values.end()) {
          return p.name + " " + show(v) + " is not one of " + nlohmann::json(d.values).dump();
        }
        break;
      case Kind::kUniform:
      case Kind::kLogUniform:
      case Kind::kIntUniform:
      case Kind::kLogIntUniform: {
        if (!v.is_number()) return p.name + " " + show(v) + " is not a number";
        const double x = v.get<double>();
        const bool integral = d.kind == Kind::kIntUniform || d.kind == Kind::kLogIntUniform;
        if (integral && x != std::floor(x)) return p.name + " " + show(v) + " is not an integer";
        if (x < d.min) return p.name + " " + show(v) + " is below its min " + show(d.min);
        if (x > d.max) return p.name + " " + show(v) + " is above its max " + show(d.max);
        if (d.step > 0) {
          const double k = (x - d.min) / d.step;
          if (std::abs(k - std::round(k)) > 1e-6) {
            return p.name + " " + show(v) + " is off its step " + show(d.step);
          }
        }
        break;
      }
    }
  }
  for (const auto& [name, value] : params.items()) {
    if (space.Find(name) == nullptr) return "this space has no parameter " + name;
  }
  return "";
}

}  // namespace sweep::search
