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
  // kUniform / kIntUniform only: when > 0, the values are min, min + step, ..., max (max - min
  // a whole number of steps), a finite set that grid search can enumerate. 0: any value.
  double step = 0;
  std::vector<nlohmann::json> values;  // kCategorical: the choices; kConstant: the one value
};

// How many values a stepped distribution has (max - min) / step + 1; 0 when it has no step.
int64_t StepCount(const Distribution& d);
// The k-th of them, 0 <= k < StepCount(d): min + k * step, an integer for int_uniform; for
// uniform the shortest decimal within step * 1e-9 of it, so that 0.1 + 2 * 0.1 is 0.3, not
// 0.30000000000000004, and the value a trial gets reads as the user wrote the grid.
nlohmann::json StepValue(const Distribution& d, int64_t k);

// A parameter that exists only in some branches of the space: it is active when its parent is
// active and takes one of `values` (compared as JSON, so 1 matches 1.0). The parent must be a
// categorical or constant parameter declared before the child, which also rules out cycles.
// An inactive parameter is absent from a trial's params, not filled with a placeholder.
struct Condition {
  std::string parent;
  std::vector<nlohmann::json> values;
};

struct Parameter {
  std::string name;
  Distribution distribution;
  std::optional<Condition> condition;  // nullopt: always active
};

// Checks one distribution: min <= max, log ranges above zero, integer bounds integral,
// a step only on uniform / int_uniform (positive, integral for int_uniform, dividing max - min),
// non-empty values; and the shape of a condition (a parent other than itself, some values).
// The message names the parameter. What the condition refers to is checked by SearchSpace::Add.
Status Validate(const Parameter& parameter);

// The name a config file and an error message use for a kind ("log_uniform"), and back again;
// KindFromName gives nullopt for a name it does not know.
std::string_view KindName(Distribution::Kind kind);
std::optional<Distribution::Kind> KindFromName(std::string_view name);

// The parameters in the order they were declared. Names are unique.
class SearchSpace {
 public:
  // Validates; refuses a duplicate name, and a condition whose parent is not declared yet, is
  // not categorical or constant, or does not have every listed value among its values.
  Status Add(Parameter parameter);
  const std::vector<Parameter>& parameters() const { return parameters_; }
  // nullptr when no parameter has that name.
  const Parameter* Find(std::string_view name) const;

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

// Why `params` (a trial's parameters, as a sampler gives them) is not a point of `space`: a
// parameter missing, one the space does not have (or has inactive there), a value outside its
// range or off its step, or not among its values ("lr 0.2 is above its max 0.1"). Empty when
// it is one. For carrying trials from one sweep into another (`sweep run --from`).
std::string Outside(const SearchSpace& space, const nlohmann::json& params);

// One text per point, however its numbers are written: 2, 2.0 and 2e0 give the same key (a grid
// of int values and one of stepped floats share points).
std::string PointKey(const nlohmann::json& params);

// Every distinct assignment of the active parameters' values, in lexicographic order of the
// value indices taken in declaration order (first declared varies slowest). Without conditions
// that is the full Cartesian product. A conditional parameter multiplies only the branches where
// it is active, and size() counts exactly the distinct assignments. Trial i costs
// O(#parameters * log #values); nothing is enumerated. A stepped uniform or int_uniform is an
// axis of its StepCount values, in increasing order. Refuses a range without a step (uniform,
// log_uniform, int ranges) naming the parameter, and a space beyond 2^63 points.
Result<std::unique_ptr<Sampler>> MakeGridSampler(const SearchSpace& space);

// Independent draws; the value of parameter p in trial i depends only on (seed, i, p's name).
// A stepped distribution gives each of its StepCount values the same chance.
// A conditional parameter is drawn (with that same value) only when active, so adding one leaves
// every other parameter's draws unchanged.
std::unique_ptr<Sampler> MakeRandomSampler(const SearchSpace& space, uint64_t seed);

}  // namespace sweep::search
