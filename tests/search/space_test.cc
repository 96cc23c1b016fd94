// Tests for search-space validation: every refusal and its exact message, and SearchSpace::Add.
// Messages are pinned because users read them in config errors; change them on purpose only.
// Single-threaded.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "search/space.h"
#include "search_test_util.h"

namespace sweep::search {
namespace {

using Kind = Distribution::Kind;
using nlohmann::json;

using testing::kInf;
using testing::kNan;

using testing::Range;
using testing::Space;
using testing::Stepped;
using testing::Values;
using testing::When;

void ExpectRefused(const Parameter& p, const std::string& message) {
  Status status = Validate(p);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << message;
  EXPECT_EQ(status.message(), message);
}

TEST(ValidateTest, AcceptsEveryValidKind) {
  EXPECT_TRUE(Validate(Range("a", Kind::kUniform, -1, 1)).ok());
  EXPECT_TRUE(Validate(Range("b", Kind::kLogUniform, 1e-5, 1e-1)).ok());
  EXPECT_TRUE(Validate(Range("c", Kind::kIntUniform, -3, 7)).ok());
  EXPECT_TRUE(Validate(Range("d", Kind::kLogIntUniform, 1, 1024)).ok());
  EXPECT_TRUE(Validate(Values("e", Kind::kCategorical, {"adam", "sgd"})).ok());
  EXPECT_TRUE(Validate(Values("f", Kind::kConstant, {32})).ok());
  EXPECT_TRUE(
      Validate(Values("g", Kind::kCategorical, {json::array({256}), json::array({512, 256})}))
          .ok());
}

TEST(ValidateTest, RefusesMinAboveMax) {
  ExpectRefused(Range("lr", Kind::kUniform, 2, 1),
                "lr: uniform needs min <= max (got min=2, max=1)");
  ExpectRefused(Range("lr", Kind::kLogUniform, 0.1, 0.01),
                "lr: log_uniform needs min <= max (got min=0.1, max=0.01)");
  ExpectRefused(Range("n", Kind::kIntUniform, 5, 4),
                "n: int_uniform needs min <= max (got min=5, max=4)");
  ExpectRefused(Range("n", Kind::kLogIntUniform, 8, 2),
                "n: log_int_uniform needs min <= max (got min=8, max=2)");
}

TEST(ValidateTest, RefusesEmptyContinuousRange) {
  ExpectRefused(Range("x", Kind::kUniform, 1, 1),
                "x: uniform has an empty range (min == max == 1); use a constant instead");
  ExpectRefused(Range("lr", Kind::kLogUniform, 0.001, 0.001),
                "lr: log_uniform has an empty range (min == max == 0.001); use a constant instead");
}

TEST(ValidateTest, AllowsSingleIntegerRange) {
  EXPECT_TRUE(Validate(Range("n", Kind::kIntUniform, 3, 3)).ok());
  EXPECT_TRUE(Validate(Range("n", Kind::kLogIntUniform, 1, 1)).ok());
}

TEST(ValidateTest, RefusesNonFiniteBounds) {
  ExpectRefused(Range("x", Kind::kUniform, kNan, 1),
                "x: uniform bounds must be finite (got min=nan, max=1)");
  ExpectRefused(Range("x", Kind::kUniform, 0, kInf),
                "x: uniform bounds must be finite (got min=0, max=inf)");
  ExpectRefused(Range("lr", Kind::kLogUniform, 1e-3, kInf),
                "lr: log_uniform bounds must be finite (got min=0.001, max=inf)");
  ExpectRefused(Range("n", Kind::kIntUniform, -kInf, 3),
                "n: int_uniform bounds must be finite (got min=-inf, max=3)");
  ExpectRefused(Range("n", Kind::kLogIntUniform, 1, kNan),
                "n: log_int_uniform bounds must be finite (got min=1, max=nan)");
}

TEST(ValidateTest, LogUniformNeedsPositiveMin) {
  ExpectRefused(Range("lr", Kind::kLogUniform, 0, 1), "lr: log_uniform needs min > 0 (got 0)");
  ExpectRefused(Range("lr", Kind::kLogUniform, -0.5, 1),
                "lr: log_uniform needs min > 0 (got -0.5)");
}

TEST(ValidateTest, IntegerKindsNeedIntegralBounds) {
  ExpectRefused(Range("n", Kind::kIntUniform, 1.5, 4),
                "n: int_uniform bounds must be integers (got min=1.5, max=4)");
  ExpectRefused(Range("n", Kind::kIntUniform, 1, 4.25),
                "n: int_uniform bounds must be integers (got min=1, max=4.25)");
  ExpectRefused(Range("n", Kind::kLogIntUniform, 1, 10.5),
                "n: log_int_uniform bounds must be integers (got min=1, max=10.5)");
}

TEST(ValidateTest, IntegerKindsRefuseBoundsBeyondExactDoubles) {
  ExpectRefused(Range("n", Kind::kIntUniform, 0, 1e17),
                "n: int_uniform bounds must lie within +-2^53 (got min=0, max=1e+17)");
  EXPECT_TRUE(
      Validate(Range("n", Kind::kIntUniform, -9007199254740992.0, 9007199254740992.0)).ok());
}

TEST(ValidateTest, LogIntUniformNeedsMinAtLeastOne) {
  ExpectRefused(Range("n", Kind::kLogIntUniform, 0, 10),
                "n: log_int_uniform needs min >= 1 (got 0)");
  ExpectRefused(Range("n", Kind::kLogIntUniform, -4, 10),
                "n: log_int_uniform needs min >= 1 (got -4)");
}

TEST(ValidateTest, UniformRefusesOverflowingWidth) {
  ExpectRefused(Range("x", Kind::kUniform, -1e308, 1e308),
                "x: uniform range is too wide (max - min overflows) (got min=-1e+308, max=1e+308)");
}

TEST(ValidateTest, AcceptsAStepThatDividesTheRange) {
  EXPECT_TRUE(Validate(Stepped("x", Kind::kUniform, 0, 1, 0.1)).ok());  // 10.000000000000002
  EXPECT_TRUE(Validate(Stepped("x", Kind::kUniform, 0.001, 0.01, 0.001)).ok());
  EXPECT_TRUE(Validate(Stepped("bs", Kind::kIntUniform, 16, 256, 16)).ok());
  EXPECT_TRUE(Validate(Stepped("n", Kind::kIntUniform, 5, 5, 3)).ok());  // one value
}

TEST(ValidateTest, RefusesAStepThatDoesNotDivideTheRange) {
  ExpectRefused(Stepped("x", Kind::kUniform, 0, 1, 0.3),
                "x: uniform: max - min (1) is not a whole number of steps of 0.3; the last value "
                "would be 0.9, so set max = 0.9 or change the step");
  ExpectRefused(Stepped("bs", Kind::kIntUniform, 16, 250, 16),
                "bs: int_uniform: max - min (234) is not a whole number of steps of 16; the last "
                "value would be 240, so set max = 240 or change the step");
}

// Past a few hundred million steps a relative tolerance would take any step: integers are
// checked exactly, reals within the rounding of the division.
TEST(ValidateTest, AStepMustDivideAHugeRangeToo) {
  ExpectRefused(Stepped("n", Kind::kIntUniform, 0, 1000000001, 3),
                "n: int_uniform: max - min (1000000001) is not a whole number of steps of 3; the "
                "last value would be 999999999, so set max = 999999999 or change the step");
  EXPECT_TRUE(Validate(Stepped("n", Kind::kIntUniform, 0, 999999999, 3)).ok());
  EXPECT_EQ(StepCount(Stepped("n", Kind::kIntUniform, 0, 999999999, 3).distribution), 333333334);
  Status fine = Validate(Stepped("x", Kind::kUniform, 0, 1, 1.5e-9));
  EXPECT_FALSE(fine.ok());
  EXPECT_TRUE(Validate(Stepped("x", Kind::kUniform, 0, 1, 1e-9)).ok());
}

TEST(ValidateTest, RefusesAStepLargerThanTheRange) {
  ExpectRefused(Stepped("x", Kind::kUniform, 0, 1, 2),
                "x: uniform: the step (2) is larger than max - min (1); use a smaller step");
}

TEST(ValidateTest, RefusesABadStep) {
  ExpectRefused(Stepped("lr", Kind::kLogUniform, 0.1, 1, 0.1),
                "lr: log_uniform takes no step; a step applies to uniform and int_uniform");
  ExpectRefused(Stepped("n", Kind::kLogIntUniform, 1, 8, 1),
                "n: log_int_uniform takes no step; a step applies to uniform and int_uniform");
  ExpectRefused(Stepped("x", Kind::kUniform, 0, 1, -0.5), "x: uniform needs step > 0 (got -0.5)");
  ExpectRefused(Stepped("x", Kind::kUniform, 0, 1, kNan), "x: uniform needs step > 0 (got nan)");
  ExpectRefused(Stepped("n", Kind::kIntUniform, 0, 10, 2.5),
                "n: int_uniform needs an integer step (got 2.5)");
  ExpectRefused(Stepped("x", Kind::kUniform, 0, 1, 1e-17),
                "x: uniform has more than 2^53 steps of 1e-17 between min and max");
}

TEST(StepTest, CountsBothEnds) {
  EXPECT_EQ(StepCount(Stepped("x", Kind::kUniform, 0, 1, 0.1).distribution), 11);
  EXPECT_EQ(StepCount(Stepped("bs", Kind::kIntUniform, 16, 256, 16).distribution), 16);
  EXPECT_EQ(StepCount(Range("x", Kind::kUniform, 0, 1).distribution), 0);
}

TEST(StepTest, ValuesReadAsWritten) {
  const Distribution d = Stepped("x", Kind::kUniform, 0, 1, 0.1).distribution;
  EXPECT_EQ(StepValue(d, 3), json(0.3));  // 3 * 0.1 is 0.30000000000000004 in doubles
  EXPECT_EQ(StepValue(d, 7), json(0.7));
  EXPECT_EQ(StepValue(d, 10), json(1.0));
  EXPECT_TRUE(StepValue(d, 0).is_number_float());
  const Distribution fine = Stepped("x", Kind::kUniform, 1, 1 + 1e-12, 1e-15).distribution;
  EXPECT_EQ(StepValue(fine, 1).get<double>(), 1.000000000000001);  // 16 digits kept
  EXPECT_NE(StepValue(fine, 1), StepValue(fine, 2));
  // Across zero: -0.3 + 3 * 0.1 is 5.6e-17 in doubles, and the value is 0 (not -0).
  const Distribution across = Stepped("x", Kind::kUniform, -0.3, 0.3, 0.1).distribution;
  EXPECT_EQ(StepValue(across, 3).get<double>(), 0.0);
  EXPECT_FALSE(std::signbit(StepValue(across, 3).get<double>()));
  EXPECT_EQ(StepValue(across, 1), json(-0.2));
  const Distribution wide = Stepped("x", Kind::kUniform, -0.9, 0.9, 0.3).distribution;
  EXPECT_EQ(StepValue(wide, 3).get<double>(), 0.0);
  const Distribution big = Stepped("x", Kind::kUniform, 1e300, 2e300, 1e299).distribution;
  EXPECT_EQ(StepValue(big, 10), json(2e300));
  const Distribution tiny = Stepped("x", Kind::kUniform, 0, 1e-29, 1e-30).distribution;
  EXPECT_EQ(StepValue(tiny, 3), json(3e-30));
  const Distribution ints = Stepped("bs", Kind::kIntUniform, -16, 256, 16).distribution;
  EXPECT_EQ(StepValue(ints, 2), json(16));
  EXPECT_TRUE(StepValue(ints, 2).is_number_integer());
}

TEST(ValidateTest, CategoricalNeedsValues) {
  ExpectRefused(Values("opt", Kind::kCategorical, {}), "opt: categorical needs at least one value");
}

TEST(ValidateTest, ConstantNeedsExactlyOneValue) {
  ExpectRefused(Values("bs", Kind::kConstant, {}), "bs: constant needs exactly one value (got 0)");
  ExpectRefused(Values("bs", Kind::kConstant, {32, 64}),
                "bs: constant needs exactly one value (got 2)");
}

TEST(ValidateTest, RefusesEmptyName) {
  ExpectRefused(Range("", Kind::kUniform, 0, 1), "a parameter needs a non-empty name");
}

TEST(ValidateTest, RefusesUnknownKind) {
  ExpectRefused(Range("x", static_cast<Kind>(42), 0, 1), "x: unknown distribution kind 42");
}

TEST(KindNameTest, RoundTripsEveryKind) {
  for (Kind kind : {Kind::kConstant, Kind::kUniform, Kind::kLogUniform, Kind::kIntUniform,
                    Kind::kLogIntUniform, Kind::kCategorical}) {
    EXPECT_EQ(KindFromName(KindName(kind)), kind) << KindName(kind);
  }
  EXPECT_EQ(KindName(Kind::kLogIntUniform), "log_int_uniform");
  EXPECT_EQ(KindFromName("loguniform"), std::nullopt);
  EXPECT_EQ(KindFromName(""), std::nullopt);
}

TEST(SearchSpaceTest, KeepsDeclarationOrder) {
  SearchSpace space;
  ASSERT_TRUE(space.Add(Range("z", Kind::kUniform, 0, 1)).ok());
  ASSERT_TRUE(space.Add(Values("a", Kind::kCategorical, {1, 2})).ok());
  ASSERT_TRUE(space.Add(Range("m", Kind::kIntUniform, 0, 3)).ok());
  ASSERT_EQ(space.parameters().size(), 3u);
  EXPECT_EQ(space.parameters()[0].name, "z");
  EXPECT_EQ(space.parameters()[1].name, "a");
  EXPECT_EQ(space.parameters()[2].name, "m");
}

TEST(SearchSpaceTest, RefusesDuplicateName) {
  SearchSpace space;
  ASSERT_TRUE(space.Add(Range("lr", Kind::kLogUniform, 1e-4, 1e-1)).ok());
  Status status = space.Add(Values("lr", Kind::kConstant, {0.1}));
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(status.message(), "lr: parameter declared twice");
  EXPECT_EQ(space.parameters().size(), 1u);
  EXPECT_EQ(space.parameters()[0].distribution.kind, Kind::kLogUniform);
}

TEST(SearchSpaceTest, RefusesInvalidParameterAndKeepsTheRest) {
  SearchSpace space;
  ASSERT_TRUE(space.Add(Range("x", Kind::kUniform, 0, 1)).ok());
  Status status = space.Add(Range("lr", Kind::kLogUniform, 0, 1));
  EXPECT_EQ(status.message(), "lr: log_uniform needs min > 0 (got 0)");
  ASSERT_EQ(space.parameters().size(), 1u);
  EXPECT_EQ(space.parameters()[0].name, "x");
}

// ---- Conditions ----

SearchSpace OptimizerSpace() {
  SearchSpace space;
  EXPECT_TRUE(space.Add(Range("lr", Kind::kLogUniform, 1e-4, 1e-1)).ok());
  EXPECT_TRUE(space.Add(Values("optimizer", Kind::kCategorical, {"sgd", "adamw"})).ok());
  return space;
}

TEST(ConditionTest, ValidateChecksTheConditionsShape) {
  ExpectRefused(When(Range("momentum", Kind::kUniform, 0.8, 0.99), "", {"sgd"}),
                "momentum: a condition needs the name of its parent");
  ExpectRefused(When(Values("m", Kind::kCategorical, {1, 2}), "m", {1}),
                "m: a parameter cannot depend on itself");
  ExpectRefused(When(Range("momentum", Kind::kUniform, 0.8, 0.99), "optimizer", {}),
                "momentum: condition on 'optimizer' lists no values, so it could never be active");
  // The distribution is still checked first.
  ExpectRefused(When(Range("momentum", Kind::kUniform, 1, 0), "optimizer", {"sgd"}),
                "momentum: uniform needs min <= max (got min=1, max=0)");
}

TEST(ConditionTest, AcceptsACategoricalParentDeclaredBefore) {
  SearchSpace space = OptimizerSpace();
  Status status =
      space.Add(When(Range("momentum", Kind::kUniform, 0.8, 0.99), "optimizer", {"sgd"}));
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_NE(space.Find("momentum"), nullptr);
  EXPECT_EQ(space.Find("momentum")->condition->parent, "optimizer");
  EXPECT_EQ(space.Find("nope"), nullptr);
}

TEST(ConditionTest, RefusesAParentNotDeclaredBefore) {
  SearchSpace space = OptimizerSpace();
  Status status =
      space.Add(When(Range("momentum", Kind::kUniform, 0.8, 0.99), "optimiser", {"sgd"}));
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "momentum: condition on 'optimiser', which is not a parameter declared before it");
  // Declared after the child: the same refusal, so a cycle can never be built.
  SearchSpace later;
  EXPECT_FALSE(
      later.Add(When(Range("momentum", Kind::kUniform, 0.8, 0.99), "optimizer", {"sgd"})).ok());
  EXPECT_TRUE(later.parameters().empty());
}

TEST(ConditionTest, RefusesANonCategoricalParent) {
  SearchSpace space = OptimizerSpace();
  Status status = space.Add(When(Values("warmup", Kind::kCategorical, {0, 5}), "lr", {0.1}));
  EXPECT_EQ(status.message(),
            "warmup: condition on 'lr', which is log_uniform; a parent must be categorical "
            "(values = [...])");
}

TEST(ConditionTest, RefusesAValueTheParentNeverTakes) {
  SearchSpace space = OptimizerSpace();
  Status status =
      space.Add(When(Range("momentum", Kind::kUniform, 0.8, 0.99), "optimizer", {"sgd", "sdg"}));
  EXPECT_EQ(status.message(),
            R"(momentum: condition value "sdg" is not one of optimizer's values ["sgd","adamw"])");
  EXPECT_EQ(space.parameters().size(), 2u);
}

TEST(ConditionTest, ConstantParentAndNumericValuesCompareAsJson) {
  SearchSpace space;
  ASSERT_TRUE(space.Add(Values("epochs", Kind::kConstant, {27})).ok());
  ASSERT_TRUE(space.Add(Values("batch", Kind::kCategorical, {64, 128})).ok());
  EXPECT_TRUE(space.Add(When(Values("a", Kind::kCategorical, {1, 2}), "epochs", {27.0})).ok());
  EXPECT_TRUE(space.Add(When(Range("b", Kind::kUniform, 0, 1), "batch", {128})).ok());
  EXPECT_FALSE(space.Add(When(Range("c", Kind::kUniform, 0, 1), "batch", {"128"})).ok());
}

TEST(ConditionTest, AChildMayBeAParent) {
  SearchSpace space = OptimizerSpace();
  ASSERT_TRUE(
      space.Add(When(Values("momentum", Kind::kCategorical, {0.0, 0.9}), "optimizer", {"sgd"}))
          .ok());
  EXPECT_TRUE(
      space.Add(When(Values("nesterov", Kind::kCategorical, {true, false}), "momentum", {0.9}))
          .ok());
}

// Whether a trial of one sweep is a point of another's space (`sweep run --from`): each reason
// it is not names the parameter and the bound it misses.
TEST(OutsideTest, TellsWhyATrialIsNotAPointOfTheSpace) {
  SearchSpace space;
  ASSERT_TRUE(space.Add(Range("lr", Kind::kLogUniform, 0.01, 0.1)).ok());
  ASSERT_TRUE(space.Add(Stepped("width", Kind::kIntUniform, 16, 64, 16)).ok());
  ASSERT_TRUE(space.Add(Values("opt", Kind::kCategorical, {"sgd", "adam"})).ok());
  ASSERT_TRUE(space.Add(Values("epochs", Kind::kConstant, {12})).ok());
  Parameter beta = Range("beta", Kind::kUniform, 0.8, 0.99);
  beta.condition = Condition{"opt", {"adam"}};
  ASSERT_TRUE(space.Add(beta).ok());
  const json inside = {{"lr", 0.05}, {"width", 32}, {"opt", "sgd"}, {"epochs", 12.0}};
  EXPECT_EQ(Outside(space, inside), "");
  EXPECT_EQ(
      Outside(space,
              json{{"lr", 0.05}, {"width", 48}, {"opt", "adam"}, {"epochs", 12}, {"beta", 0.9}}),
      "");
  auto with = [&](const std::string& key, json value) {
    json p = inside;
    p[key] = std::move(value);
    return Outside(space, p);
  };
  EXPECT_EQ(with("lr", 0.2), "lr 0.2 is above its max 0.1");
  EXPECT_EQ(with("lr", 0.001), "lr 0.001 is below its min 0.01");
  EXPECT_EQ(with("lr", "fast"), "lr \"fast\" is not a number");
  EXPECT_EQ(with("width", 24), "width 24 is off its step 16");
  EXPECT_EQ(with("width", 32.5), "width 32.5 is not an integer");
  EXPECT_EQ(with("opt", "rmsprop"), "opt \"rmsprop\" is not one of [\"sgd\",\"adam\"]");
  EXPECT_EQ(with("epochs", 20), "epochs is 20, not 12");
  EXPECT_EQ(with("beta", 0.9), "beta is set where this space has it inactive");
  EXPECT_EQ(with("momentum", 0.9), "this space has no parameter momentum");
  json missing = inside;
  missing.erase("width");
  EXPECT_EQ(Outside(space, missing), "it has no width");
  EXPECT_EQ(Outside(space, json::array()), "its parameters are not an object");
}

}  // namespace
}  // namespace sweep::search
