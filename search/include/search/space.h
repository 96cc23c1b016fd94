// Search space and samplers: what hyperparameters a sweep varies and which values trial i gets.
// Samplers are pure: trial i's parameters are a function of (space, seed, i) alone, with no
// clock, I/O or hidden state, so a resumed sweep draws exactly the sequence it would have drawn.
// A Sampler is immutable after construction and safe to call from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace sweep::search {

struct Distribution {
  enum class Kind {
    kConstant,       // values[0], always
    kUniform,        // real in [min, max]
    kLogUniform,     // real, log-uniform in [min, max], min > 0
    kIntUniform,     // integer in [min, max], both ends included
    kLogIntUniform,  // integer, log-uniform in [min, max], min >= 1
    kCategorical,    // one of values (a value may be a list, a string, a number, a bool)
  };
  Kind kind = Kind::kConstant;
  double min = 0;
  double max = 0;
  std::vector<nlohmann::json> values;  // kCategorical: the choices; kConstant: the one value
};

struct Parameter {
  std::string name;
  Distribution distribution;
};

// Checks one distribution: min <= max, log ranges above zero, integer bounds integral,
// non-empty values. The message names the parameter.
Status Validate(const Parameter& parameter);

// The name a config file and an error message use for a kind ("log_uniform"), and back again;
// KindFromName gives nullopt for a name it does not know.
std::string_view KindName(Distribution::Kind kind);
std::optional<Distribution::Kind> KindFromName(std::string_view name);

// The parameters in the order they were declared. Names are unique.
class SearchSpace {
 public:
  Status Add(Parameter parameter);  // validates; refuses a duplicate name
  const std::vector<Parameter>& parameters() const { return parameters_; }

 private:
  std::vector<Parameter> parameters_;
};

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Trial `index`'s parameters as a JSON object (keys sorted), or nullopt when the sampler is
  // exhausted at that index (grid only). Pure.
  virtual std::optional<nlohmann::json> Sample(int64_t index) const = 0;
  // Number of distinct trials, when finite (grid); nullopt for random search.
  virtual std::optional<int64_t> size() const = 0;
};

// Full Cartesian product of the parameters' values, first declared parameter varying slowest.
// Refuses a continuous distribution (uniform, log_uniform, int ranges) naming the parameter.
Result<std::unique_ptr<Sampler>> MakeGridSampler(const SearchSpace& space);

// Independent draws; the value of parameter p in trial i depends only on (seed, i, p's name).
std::unique_ptr<Sampler> MakeRandomSampler(const SearchSpace& space, uint64_t seed);

}  // namespace sweep::search
