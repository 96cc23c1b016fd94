// Builders for search-space parameters in the search tests.
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "search/space.h"

namespace sweep::search::testing {

inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// A numeric distribution over [min, max].
inline Parameter Range(std::string name, Distribution::Kind kind, double min, double max) {
  Parameter p;
  p.name = std::move(name);
  p.distribution.kind = kind;
  p.distribution.min = min;
  p.distribution.max = max;
  return p;
}

// A uniform or int_uniform over [min, max] in steps of `step`.
inline Parameter Stepped(std::string name, Distribution::Kind kind, double min, double max,
                         double step) {
  Parameter p = Range(std::move(name), kind, min, max);
  p.distribution.step = step;
  return p;
}

// A categorical or constant parameter.
inline Parameter Values(std::string name, Distribution::Kind kind,
                        std::vector<nlohmann::json> values) {
  Parameter p;
  p.name = std::move(name);
  p.distribution.kind = kind;
  p.distribution.values = std::move(values);
  return p;
}

// A space of `parameters`, each of which must be accepted.
inline SearchSpace Space(std::vector<Parameter> parameters) {
  SearchSpace space;
  for (Parameter& p : parameters) {
    Status status = space.Add(std::move(p));
    EXPECT_TRUE(status.ok()) << status.message();
  }
  return space;
}

// p, active only where `parent` takes one of `values`.
inline Parameter When(Parameter p, std::string parent, std::vector<nlohmann::json> values) {
  p.condition = Condition{std::move(parent), std::move(values)};
  return p;
}

}  // namespace sweep::search::testing
