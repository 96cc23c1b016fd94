// Analytic test functions from the HPO literature (Branin, Rosenbrock, Hartmann6, Sphere,
// Ackley, Hartmann3, Levy, Styblinski-Tang) that a trial worker can evaluate instead of training a
// model, so a whole sweep, early stopping included, can be exercised in milliseconds. The catalogue
// is immutable static data and every function here is pure, so all of it is safe to call from any
// number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace sweep::executor {

// The metric an analytic trial reports; lower is better.
inline constexpr std::string_view kFunctionMetric = "value";

struct FunctionInfo {
  std::string name;  // "branin"
  // Number of inputs, named x1..xn. 0 means any n >= kMinAnyDims, chosen by which names a
  // search space declares.
  int dims = 0;
  // The conventional search box: one (low, high) per input, or a single pair for every input
  // when dims == 0. Advisory: EvaluateFunction accepts points outside it.
  std::vector<std::pair<double, double>> domain;
  // The global minimum value (to the precision the literature gives); per input when
  // minimum_per_input (Styblinski-Tang's grows with n): MinimumOf gives the n-D one.
  double minimum = 0;
  std::string description;
  bool minimum_per_input = false;
};

inline constexpr int kMinAnyDims = 2;

// Every function, in a fixed order: branin, rosenbrock, hartmann6, sphere, ackley, hartmann3,
// levy, styblinski_tang.
const std::vector<FunctionInfo>& Functions();

// nullptr when no function has that name.
const FunctionInfo* FindFunction(std::string_view name);

// The (low, high) box for input x<index> (1-based) of `info`, whichever way domain is given.
std::pair<double, double> DomainOf(const FunctionInfo& info, int index);

// The global minimum of `info` over `dims` inputs: minimum, times dims when minimum_per_input.
double MinimumOf(const FunctionInfo& info, int dims);

// Checks that `param_names` are exactly x1..xn for the function's n (for dims == 0: for some
// n >= kMinAnyDims, with no gap). InvalidArgument naming the first missing, unexpected or
// repeated name, e.g. "branin: missing parameter 'x2' (expects x1..x2)".
Status CheckFunctionParams(const FunctionInfo& info, const std::vector<std::string>& param_names);

// The function's value at `params`, a JSON object {"x1": 0.5, ...}. NotFound for an unknown
// function; InvalidArgument when the names fail CheckFunctionParams or a value is not a finite
// number (booleans and strings are refused), or when the value overflows (Rosenbrock far out).
Result<double> EvaluateFunction(std::string_view name, const nlohmann::json& params);

// A synthetic learning curve for early-stopping tests: the value reported at step `step` of
// `steps` (1-based), non-increasing in step and equal to final_value at step >= steps.
//   value = final_value + gap * shape(step)
// where shape falls from 1 at step 1 to 0 at `steps` as a power law whose exponent, and gap's
// size relative to |final_value - minimum|, are hashed from `params`. Worse points start
// higher, so early rankings track final ones, but the hashed factors make curves cross.
// Deterministic: the same arguments always give the same value. A step below 1 reads as 1;
// steps <= 1 or a non-finite final_value gives final_value back unchanged.
double CurveValue(double final_value, double minimum, const nlohmann::json& params, int64_t step,
                  int64_t steps);

}  // namespace sweep::executor
