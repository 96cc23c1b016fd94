// Tests for the analytic test functions: known minima and points, parameter checks and the
// synthetic learning curve. Reference values were computed independently (Python, float64).
// Single-threaded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "executor/functions.h"

namespace sweep::executor {
namespace {

using nlohmann::json;

// "x3" for 3. Appended because GCC 12 -O3 warns falsely (-Wrestrict) on "x" + std::string.
std::string InputName(size_t index) {
  std::string name = "x";
  name += std::to_string(index);
  return name;
}

json Point(const std::vector<double>& x) {
  json params = json::object();
  for (size_t i = 0; i < x.size(); ++i) params[InputName(i + 1)] = x[i];
  return params;
}

double Eval(std::string_view name, const std::vector<double>& x) {
  Result<double> value = EvaluateFunction(name, Point(x));
  EXPECT_TRUE(value.ok()) << value.status().message();
  return value.ok() ? *value : std::nan("");
}

std::string EvalError(std::string_view name, const json& params) {
  Result<double> value = EvaluateFunction(name, params);
  EXPECT_FALSE(value.ok());
  return value.ok() ? "" : value.status().message();
}

std::string CheckError(std::string_view name, const std::vector<std::string>& names) {
  const FunctionInfo* info = FindFunction(name);
  if (info == nullptr) return "no such function";
  Status status = CheckFunctionParams(*info, names);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  return status.message();
}

// ---- Catalogue ----

TEST(FunctionsTest, CatalogueListsEveryFunctionInOrder) {
  std::vector<std::string> names;
  for (const FunctionInfo& info : Functions()) names.push_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"branin", "rosenbrock", "hartmann6", "sphere",
                                             "ackley", "hartmann3", "levy", "styblinski_tang"}));
  for (const FunctionInfo& info : Functions()) {
    EXPECT_EQ(FindFunction(info.name), &info);
    EXPECT_FALSE(info.description.empty()) << info.name;
    // One pair per input for a fixed dimension, one pair for all inputs otherwise.
    EXPECT_EQ(info.domain.size(), info.dims > 0 ? static_cast<size_t>(info.dims) : 1u) << info.name;
  }
  EXPECT_EQ(FindFunction("griewank"), nullptr);
  EXPECT_EQ(FindFunction(""), nullptr);
  EXPECT_EQ(kFunctionMetric, "value");
}

TEST(FunctionsTest, DomainsAreTheConventionalOnes) {
  const FunctionInfo& branin = *FindFunction("branin");
  EXPECT_EQ(branin.dims, 2);
  EXPECT_EQ(DomainOf(branin, 1), (std::pair<double, double>{-5, 10}));
  EXPECT_EQ(DomainOf(branin, 2), (std::pair<double, double>{0, 15}));
  const FunctionInfo& rosenbrock = *FindFunction("rosenbrock");
  EXPECT_EQ(rosenbrock.dims, 0);
  EXPECT_EQ(DomainOf(rosenbrock, 7), (std::pair<double, double>{-5, 10}));
  const FunctionInfo& hartmann6 = *FindFunction("hartmann6");
  EXPECT_EQ(hartmann6.dims, 6);
  for (int i = 1; i <= 6; ++i) EXPECT_EQ(DomainOf(hartmann6, i), (std::pair<double, double>{0, 1}));
  EXPECT_EQ(DomainOf(*FindFunction("sphere"), 1), (std::pair<double, double>{-5.12, 5.12}));
  EXPECT_EQ(DomainOf(*FindFunction("ackley"), 3), (std::pair<double, double>{-32.768, 32.768}));
  const FunctionInfo& hartmann3 = *FindFunction("hartmann3");
  EXPECT_EQ(hartmann3.dims, 3);
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(DomainOf(hartmann3, i), (std::pair<double, double>{0, 1}));
  EXPECT_EQ(FindFunction("levy")->dims, 0);
  EXPECT_EQ(DomainOf(*FindFunction("levy"), 4), (std::pair<double, double>{-10, 10}));
  EXPECT_EQ(FindFunction("styblinski_tang")->dims, 0);
  EXPECT_EQ(DomainOf(*FindFunction("styblinski_tang"), 2), (std::pair<double, double>{-5, 5}));
}

// ---- Values ----

TEST(FunctionsTest, BraninAtItsThreeMinima) {
  const double minimum = FindFunction("branin")->minimum;
  EXPECT_NEAR(minimum, 0.397887, 1e-6);
  EXPECT_NEAR(Eval("branin", {-std::numbers::pi, 12.275}), 0.397887, 1e-6);
  EXPECT_NEAR(Eval("branin", {std::numbers::pi, 2.275}), 0.397887, 1e-6);
  EXPECT_NEAR(Eval("branin", {9.42478, 2.475}), 0.397887, 1e-6);
  EXPECT_NEAR(Eval("branin", {std::numbers::pi, 2.275}), minimum, 1e-12);
}

TEST(FunctionsTest, BraninAtKnownPoint) {
  EXPECT_NEAR(Eval("branin", {0, 0}), 55.602112642270264, 1e-9);
}

TEST(FunctionsTest, Hartmann6AtItsOptimum) {
  const double minimum = FindFunction("hartmann6")->minimum;
  EXPECT_NEAR(minimum, -3.32237, 1e-5);
  const double value = Eval("hartmann6", {0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573});
  EXPECT_NEAR(value, -3.32237, 1e-5);
  EXPECT_NEAR(value, -3.322368011391339, 1e-9);
  EXPECT_GE(value, minimum);
}

TEST(FunctionsTest, Hartmann6AtKnownPoints) {
  EXPECT_NEAR(Eval("hartmann6", {0, 0, 0, 0, 0, 0}), -0.00508911288366444, 1e-12);
  EXPECT_NEAR(Eval("hartmann6", {0.5, 0.5, 0.5, 0.5, 0.5, 0.5}), -0.5053149917022333, 1e-12);
}

TEST(FunctionsTest, RosenbrockAtOnesAndKnownPoints) {
  EXPECT_EQ(Eval("rosenbrock", {1, 1}), 0);
  EXPECT_EQ(Eval("rosenbrock", {1, 1, 1, 1, 1}), 0);
  EXPECT_EQ(Eval("rosenbrock", {0, 0}), 1);
  EXPECT_EQ(Eval("rosenbrock", {-1, 1}), 4);
  EXPECT_EQ(Eval("rosenbrock", {0, 0, 0}), 2);
  EXPECT_EQ(Eval("rosenbrock", {2, 1}), 100 * 9 + 1);
}

TEST(FunctionsTest, SphereAndAckley) {
  EXPECT_EQ(Eval("sphere", {1, 2, 3}), 14);
  EXPECT_EQ(Eval("sphere", {0, 0}), 0);
  EXPECT_NEAR(Eval("ackley", {0, 0}), 0, 1e-12);
  EXPECT_NEAR(Eval("ackley", {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}), 0, 1e-12);
  EXPECT_NEAR(Eval("ackley", {1, 1}), 3.6253849384403627, 1e-12);
  EXPECT_NEAR(Eval("ackley", {0.5, -1.5, 2.0}), 7.102062941907507, 1e-12);
}

TEST(FunctionsTest, Hartmann3AtItsOptimum) {
  const double minimum = FindFunction("hartmann3")->minimum;
  EXPECT_NEAR(minimum, -3.86278, 1e-5);
  const double value = Eval("hartmann3", {0.114614, 0.555649, 0.852547});
  EXPECT_NEAR(value, -3.86278, 1e-5);
  EXPECT_NEAR(value, minimum, 1e-9);
  EXPECT_GE(value, minimum);
}

TEST(FunctionsTest, Hartmann3AtKnownPoint) {
  EXPECT_NEAR(Eval("hartmann3", {0.5, 0.5, 0.5}), -0.6280220150705937, 1e-12);
}

TEST(FunctionsTest, LevyAtOnesAndKnownPoint) {
  EXPECT_EQ(FindFunction("levy")->minimum, 0);
  EXPECT_NEAR(Eval("levy", {1, 1}), 0, 1e-12);
  EXPECT_NEAR(Eval("levy", {1, 1, 1, 1, 1}), 0, 1e-12);
  EXPECT_NEAR(Eval("levy", {0, 0}), 0.7158445541169746, 1e-12);
  EXPECT_NEAR(Eval("levy", {2, -3, 0.5}), 9.263327128618736, 1e-12);
}

TEST(FunctionsTest, StyblinskiTangMinimumScalesWithInputs) {
  const FunctionInfo& info = *FindFunction("styblinski_tang");
  EXPECT_TRUE(info.minimum_per_input);
  EXPECT_NEAR(MinimumOf(info, 1), -39.16617, 1e-5);
  EXPECT_NEAR(MinimumOf(info, 5), -5 * 39.16617, 5e-5);
  constexpr double kArgmin = -2.903534027771178;
  EXPECT_NEAR(Eval("styblinski_tang", {kArgmin, kArgmin}), MinimumOf(info, 2), 1e-9);
  EXPECT_NEAR(Eval("styblinski_tang", {kArgmin, kArgmin, kArgmin, kArgmin, kArgmin}),
              MinimumOf(info, 5), 1e-9);
  // A fixed-dimension function's minimum does not scale.
  EXPECT_EQ(MinimumOf(*FindFunction("branin"), 7), FindFunction("branin")->minimum);
}

TEST(FunctionsTest, StyblinskiTangAtKnownPoints) {
  EXPECT_EQ(Eval("styblinski_tang", {0, 0}), 0);
  EXPECT_EQ(Eval("styblinski_tang", {1, 1}), -10);  // (1 - 16 + 5) / 2 each
  EXPECT_EQ(Eval("styblinski_tang", {2, -1, 1}), -19 - 10 - 5);
}

// No point of the domain may beat the stated minimum: a wrong constant would show up here.
TEST(FunctionsTest, NoPointInTheDomainBeatsTheMinimum) {
  uint64_t state = 1;
  auto next_unit = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  for (const FunctionInfo& info : Functions()) {
    const int n = info.dims > 0 ? info.dims : 4;
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<double> x;
      for (int i = 1; i <= n; ++i) {
        auto [low, high] = DomainOf(info, i);
        x.push_back(low + next_unit() * (high - low));
      }
      EXPECT_GE(Eval(info.name, x), MinimumOf(info, n) - 1e-9) << info.name;
    }
  }
}

// ---- Parameter checks ----

TEST(FunctionsTest, CheckAcceptsExactlyTheInputs) {
  EXPECT_TRUE(CheckFunctionParams(*FindFunction("branin"), {"x2", "x1"}).ok());
  EXPECT_TRUE(
      CheckFunctionParams(*FindFunction("hartmann6"), {"x1", "x2", "x3", "x4", "x5", "x6"}).ok());
  EXPECT_TRUE(CheckFunctionParams(*FindFunction("rosenbrock"), {"x1", "x2"}).ok());
  std::vector<std::string> many;
  for (int i = 1; i <= 12; ++i) many.push_back(InputName(static_cast<size_t>(i)));
  EXPECT_TRUE(CheckFunctionParams(*FindFunction("ackley"), many).ok());
}

TEST(FunctionsTest, CheckNamesTheMissingParameter) {
  EXPECT_EQ(CheckError("branin", {"x1"}), "branin: missing parameter 'x2' (expects x1..x2)");
  EXPECT_EQ(CheckError("branin", {}), "branin: missing parameter 'x1' (expects x1..x2)");
  EXPECT_EQ(CheckError("hartmann6", {"x1", "x2", "x3", "x5", "x6"}),
            "hartmann6: missing parameter 'x4' (expects x1..x6)");
  EXPECT_EQ(CheckError("rosenbrock", {"x1"}),
            "rosenbrock: missing parameter 'x2' (expects x1..xn, n >= 2)");
  EXPECT_EQ(CheckError("sphere", {"x1", "x2", "x4"}),
            "sphere: missing parameter 'x3' (expects x1..xn, n >= 2)");
}

TEST(FunctionsTest, CheckNamesTheUnexpectedParameter) {
  EXPECT_EQ(CheckError("branin", {"x1", "x2", "lr"}),
            "branin: unexpected parameter 'lr' (expects x1..x2)");
  EXPECT_EQ(CheckError("branin", {"x1", "x2", "x3"}),
            "branin: unexpected parameter 'x3' (expects x1..x2)");
  EXPECT_EQ(CheckError("rosenbrock", {"x0", "x1", "x2"}),
            "rosenbrock: unexpected parameter 'x0' (expects x1..xn, n >= 2)");
  EXPECT_EQ(CheckError("rosenbrock", {"x1", "x02"}),
            "rosenbrock: unexpected parameter 'x02' (expects x1..xn, n >= 2)");
  EXPECT_EQ(CheckError("sphere", {"x1", "x2", "x"}),
            "sphere: unexpected parameter 'x' (expects x1..xn, n >= 2)");
  EXPECT_EQ(CheckError("sphere", {"x1", "x2", "x3a"}),
            "sphere: unexpected parameter 'x3a' (expects x1..xn, n >= 2)");
  EXPECT_EQ(CheckError("sphere", {"x1", "x99999999999"}),
            "sphere: unexpected parameter 'x99999999999' (expects x1..xn, n >= 2)");
}

TEST(FunctionsTest, CheckNamesARepeatedParameter) {
  EXPECT_EQ(CheckError("branin", {"x1", "x1", "x2"}), "branin: parameter 'x1' given twice");
}

TEST(FunctionsTest, EvaluateRefusesBadInput) {
  Result<double> unknown = EvaluateFunction("griewank", Point({0, 0}));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            "unknown function 'griewank' (known: branin, rosenbrock, hartmann6, sphere, ackley, "
            "hartmann3, levy, styblinski_tang)");

  EXPECT_EQ(EvalError("branin", json::array({1, 2})),
            "branin: parameters must be a JSON object, got [1,2]");
  EXPECT_EQ(EvalError("branin", json{{"x1", 1}}),
            "branin: missing parameter 'x2' (expects x1..x2)");
  EXPECT_EQ(EvalError("branin", json{{"x1", 1}, {"x2", 2}, {"lr", 0.1}}),
            "branin: unexpected parameter 'lr' (expects x1..x2)");
  EXPECT_EQ(EvalError("branin", json{{"x1", 1}, {"x2", "2"}}),
            "branin: parameter 'x2' must be a number, got \"2\"");
  EXPECT_EQ(EvalError("branin", json{{"x1", true}, {"x2", 2}}),
            "branin: parameter 'x1' must be a number, got true");
  EXPECT_EQ(EvalError("branin", json{{"x1", nullptr}, {"x2", 2}}),
            "branin: parameter 'x1' must be a number, got null");
  EXPECT_EQ(EvalError("branin", json{{"x1", std::nan("")}, {"x2", 2}}),
            "branin: parameter 'x1' must be finite");
  EXPECT_EQ(EvalError("rosenbrock", json{{"x1", 1e200}, {"x2", 0}}),
            "rosenbrock: value overflows at {\"x1\":1e+200,\"x2\":0}");
}

TEST(FunctionsTest, EvaluateAcceptsIntegersAndUnsorted) {
  // Integers from an int_uniform search space are numbers too.
  EXPECT_EQ(*EvaluateFunction("sphere", json{{"x2", 3}, {"x1", -4}}), 25);
  EXPECT_EQ(*EvaluateFunction("sphere", json{{"x1", 2u}, {"x2", 0.5}}), 4.25);
}

// ---- Learning curve ----

TEST(CurveValueTest, EndsAtTheFinalValue) {
  const json params = Point({1.5, 7.25});
  EXPECT_EQ(CurveValue(3.0, 0.397887, params, 100, 100), 3.0);
  EXPECT_EQ(CurveValue(3.0, 0.397887, params, 150, 100), 3.0);
  EXPECT_EQ(CurveValue(-1.0, -3.32237, params, 20, 20), -1.0);
  EXPECT_GT(CurveValue(3.0, 0.397887, params, 99, 100), 3.0);
}

TEST(CurveValueTest, MonotoneNonIncreasingAndStartsAboveFinal) {
  for (int p = 0; p < 50; ++p) {
    const json params = Point({0.1 * p, 15 - 0.3 * p});
    for (double final_value : {0.397887, 0.5, 3.0, 120.0}) {
      const int64_t steps = 10 + 7 * p;
      double previous = CurveValue(final_value, 0.397887, params, 1, steps);
      EXPECT_GT(previous, final_value);
      for (int64_t t = 2; t <= steps; ++t) {
        const double value = CurveValue(final_value, 0.397887, params, t, steps);
        EXPECT_LE(value, previous) << "p=" << p << " t=" << t;
        EXPECT_GE(value, final_value);
        previous = value;
      }
      EXPECT_EQ(previous, final_value);
    }
  }
}

TEST(CurveValueTest, Deterministic) {
  const json a = json{{"x1", 0.25}, {"x2", 0.75}};
  const json b = json::parse(R"({"x2": 0.75, "x1": 0.25})");
  for (int64_t t = 1; t <= 30; ++t) {
    EXPECT_EQ(CurveValue(2.0, 0.0, a, t, 30), CurveValue(2.0, 0.0, a, t, 30));
    EXPECT_EQ(CurveValue(2.0, 0.0, a, t, 30), CurveValue(2.0, 0.0, b, t, 30));
  }
}

TEST(CurveValueTest, DependsOnTheParams) {
  const double a = CurveValue(2.0, 0.0, Point({0.25, 0.75}), 1, 30);
  const double b = CurveValue(2.0, 0.0, Point({0.25, 0.76}), 1, 30);
  EXPECT_NE(a, b);
}

TEST(CurveValueTest, EdgeCases) {
  const json params = Point({1, 2});
  EXPECT_EQ(CurveValue(5.0, 0.0, params, 0, 10), CurveValue(5.0, 0.0, params, 1, 10));
  EXPECT_EQ(CurveValue(5.0, 0.0, params, -3, 10), CurveValue(5.0, 0.0, params, 1, 10));
  EXPECT_EQ(CurveValue(5.0, 0.0, params, 1, 1), 5.0);
  EXPECT_EQ(CurveValue(5.0, 0.0, params, 1, 0), 5.0);
  EXPECT_TRUE(std::isinf(CurveValue(INFINITY, 0.0, params, 1, 10)));
  // Even a trial that ends at the optimum shows some progress.
  EXPECT_GT(CurveValue(0.0, 0.0, params, 1, 10), 0.0);
  EXPECT_TRUE(std::isfinite(CurveValue(1e308, -1e308, params, 1, 10)));
  // Params holding strings that are not UTF-8 still hash rather than throw.
  EXPECT_GT(CurveValue(1.0, 0.0, json{{"name", "\xff\xfe"}}, 1, 10), 1.0);
}

// Spearman rank correlation of two equally long series without ties.
double RankCorrelation(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> order(v.size());
    for (size_t i = 0; i < v.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&v](size_t i, size_t j) { return v[i] < v[j]; });
    std::vector<double> rank(v.size());
    for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = static_cast<double>(r);
    return rank;
  };
  const std::vector<double> ra = ranks(a);
  const std::vector<double> rb = ranks(b);
  const double n = static_cast<double>(a.size());
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
  return 1 - 6 * d2 / (n * (n * n - 1));
}

TEST(CurveValueTest, EarlyRankingsTrackFinalOnesButCross) {
  const double minimum = FindFunction("branin")->minimum;
  std::vector<double> finals;
  std::vector<double> early;
  for (int i = 0; i < 200; ++i) {
    const json params = Point({-5 + 15 * ((i * 37) % 200) / 200.0, 15 * ((i * 91) % 200) / 200.0});
    const double final_value = *EvaluateFunction("branin", params);
    finals.push_back(final_value);
    early.push_back(CurveValue(final_value, minimum, params, 5, 100));
  }
  const double rho = RankCorrelation(early, finals);
  EXPECT_GT(rho, 0.8);
  EXPECT_LT(rho, 1.0);  // some pairs swap order: early stopping is not trivially right
}

}  // namespace
}  // namespace sweep::executor
