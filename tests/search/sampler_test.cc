// Tests for the grid and random samplers: enumeration order, exhaustion, purity of random draws,
// bounds and rough distribution shape. Every draw uses a fixed seed, so nothing here can flake.
// Single-threaded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "search/space.h"
#include "search_test_util.h"

namespace sweep::search {
namespace {

using Kind = Distribution::Kind;
using nlohmann::json;

using testing::Range;
using testing::Space;
using testing::Stepped;
using testing::Values;
using testing::When;

// Built with += because GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + std::string.
std::string Numbered(int i) {
  std::string name = "p";
  name += std::to_string(i);
  return name;
}

std::unique_ptr<Sampler> Grid(const SearchSpace& space) {
  auto sampler = MakeGridSampler(space);
  EXPECT_TRUE(sampler.ok()) << sampler.status().message();
  return sampler.ok() ? std::move(sampler).value() : nullptr;
}

// ---- Grid ----

TEST(GridSamplerTest, EnumeratesThreeParametersFirstDeclaredSlowest) {
  // Declared width, act, dropout; JSON keys come out sorted, which is a different order.
  SearchSpace space = Space({Values("width", Kind::kCategorical, {64, 128}),
                             Values("act", Kind::kCategorical, {"relu", "tanh", "gelu"}),
                             Values("dropout", Kind::kCategorical, {0.0, 0.5})});
  auto sampler = Grid(space);
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), 12);
  const std::vector<json> expected = {
      {{"width", 64}, {"act", "relu"}, {"dropout", 0.0}},
      {{"width", 64}, {"act", "relu"}, {"dropout", 0.5}},
      {{"width", 64}, {"act", "tanh"}, {"dropout", 0.0}},
      {{"width", 64}, {"act", "tanh"}, {"dropout", 0.5}},
      {{"width", 64}, {"act", "gelu"}, {"dropout", 0.0}},
      {{"width", 64}, {"act", "gelu"}, {"dropout", 0.5}},
      {{"width", 128}, {"act", "relu"}, {"dropout", 0.0}},
      {{"width", 128}, {"act", "relu"}, {"dropout", 0.5}},
      {{"width", 128}, {"act", "tanh"}, {"dropout", 0.0}},
      {{"width", 128}, {"act", "tanh"}, {"dropout", 0.5}},
      {{"width", 128}, {"act", "gelu"}, {"dropout", 0.0}},
      {{"width", 128}, {"act", "gelu"}, {"dropout", 0.5}},
  };
  for (int64_t i = 0; i < 12; ++i) {
    auto trial = sampler->Sample(i);
    ASSERT_TRUE(trial.has_value()) << i;
    EXPECT_EQ(*trial, expected[static_cast<size_t>(i)]) << i;
  }
  EXPECT_EQ(sampler->Sample(0)->dump(), R"({"act":"relu","dropout":0.0,"width":64})");
}

TEST(GridSamplerTest, ExhaustedOutsideTheProduct) {
  auto sampler = Grid(
      Space({Values("a", Kind::kCategorical, {1, 2}), Values("b", Kind::kCategorical, {3, 4, 5})}));
  ASSERT_NE(sampler, nullptr);
  EXPECT_TRUE(sampler->Sample(5).has_value());
  EXPECT_FALSE(sampler->Sample(6).has_value());
  EXPECT_FALSE(sampler->Sample(7).has_value());
  EXPECT_FALSE(sampler->Sample(-1).has_value());
  EXPECT_FALSE(sampler->Sample(std::numeric_limits<int64_t>::max()).has_value());
}

TEST(GridSamplerTest, ConstantIsASingleValueAxis) {
  auto sampler = Grid(
      Space({Values("opt", Kind::kCategorical, {"adam", "sgd"}),
             Values("bs", Kind::kConstant, {32}), Values("seed", Kind::kCategorical, {1, 2})}));
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), 4);
  EXPECT_EQ(*sampler->Sample(0), (json{{"opt", "adam"}, {"bs", 32}, {"seed", 1}}));
  EXPECT_EQ(*sampler->Sample(3), (json{{"opt", "sgd"}, {"bs", 32}, {"seed", 2}}));
}

TEST(GridSamplerTest, ListsAreValuesLikeAnyOther) {
  auto sampler = Grid(
      Space({Values("hidden", Kind::kCategorical, {json::array({256}), json::array({512, 256})})}));
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), 2);
  EXPECT_EQ((*sampler->Sample(0))["hidden"], json::array({256}));
  EXPECT_EQ((*sampler->Sample(1))["hidden"], json::array({512, 256}));
}

TEST(GridSamplerTest, EmptySpaceIsOneEmptyTrial) {
  auto sampler = Grid(SearchSpace());
  ASSERT_NE(sampler, nullptr);
  EXPECT_EQ(sampler->size(), 1);
  EXPECT_EQ(*sampler->Sample(0), json::object());
  EXPECT_FALSE(sampler->Sample(1).has_value());
}

TEST(GridSamplerTest, RefusesEveryContinuousKind) {
  const std::vector<std::pair<Parameter, std::string>> cases = {
      {Range("x", Kind::kUniform, 0, 1),
       "grid search cannot enumerate 'x' (uniform without a step); give it `values = [...]` "
       "or a `step`"},
      {Range("lr", Kind::kLogUniform, 1e-4, 1e-1),
       "grid search cannot enumerate 'lr' (log_uniform); give it `values = [...]`"},
      {Range("n", Kind::kIntUniform, 1, 4),
       "grid search cannot enumerate 'n' (int_uniform without a step); give it `values = "
       "[...]` or a `step`"},
      {Range("bs", Kind::kLogIntUniform, 16, 512),
       "grid search cannot enumerate 'bs' (log_int_uniform); give it `values = [...]`"},
  };
  for (const auto& [parameter, message] : cases) {
    SearchSpace space = Space({Values("opt", Kind::kCategorical, {"adam"}), parameter});
    auto sampler = MakeGridSampler(space);
    ASSERT_FALSE(sampler.ok());
    EXPECT_EQ(sampler.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(sampler.status().message(), message);
  }
}

TEST(GridSamplerTest, EnumeratesSteppedRanges) {
  auto sampler = Grid(Space(
      {Stepped("x", Kind::kUniform, 0, 0.3, 0.1), Stepped("bs", Kind::kIntUniform, 16, 48, 16)}));
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), 12);
  std::vector<json> trials;
  for (int64_t i = 0; i < 12; ++i) trials.push_back(*sampler->Sample(i));
  EXPECT_EQ(trials[0], (json{{"bs", 16}, {"x", 0.0}}));
  EXPECT_EQ(trials[1], (json{{"bs", 32}, {"x", 0.0}}));
  EXPECT_EQ(trials[10], (json{{"bs", 32}, {"x", 0.3}}));
  EXPECT_EQ(trials[11], (json{{"bs", 48}, {"x", 0.3}}));
  EXPECT_EQ(std::set<json>(trials.begin(), trials.end()).size(), 12u);
  EXPECT_FALSE(sampler->Sample(12).has_value());
}

// A stepped axis of 2^40 values is decoded, not listed: building the sampler and drawing its
// last point take no memory or time in proportion to it.
TEST(GridSamplerTest, DecodesHugeSteppedRangesWithoutEnumerating) {
  const double n = 1099511627776.0;  // 2^40
  auto sampler = Grid(Space({Values("opt", Kind::kCategorical, {"sgd", "adam"}),
                             Stepped("seed", Kind::kIntUniform, 0, n - 1, 1)}));
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), int64_t{2} << 40);
  EXPECT_EQ(*sampler->Sample((int64_t{2} << 40) - 1),
            (json{{"opt", "adam"}, {"seed", (int64_t{1} << 40) - 1}}));
  EXPECT_EQ(*sampler->Sample(int64_t{1} << 40), (json{{"opt", "adam"}, {"seed", 0}}));
}

TEST(GridSamplerTest, DecodesLargeIndicesWithoutEnumerating) {
  std::vector<Parameter> parameters;
  for (int i = 0; i < 62; ++i) {
    parameters.push_back(Values(Numbered(100 + i), Kind::kCategorical, {0, 1}));
  }
  auto sampler = Grid(Space(parameters));
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), int64_t{1} << 62);
  // Bit k of the index, counting from the least significant, is the (62-1-k)th parameter.
  const int64_t index = (int64_t{1} << 61) | 5;  // p100 = 1, p159 = 1, p161 = 1, rest 0
  json trial = *sampler->Sample(index);
  for (int i = 0; i < 62; ++i) {
    const int expected = (i == 0 || i == 59 || i == 61) ? 1 : 0;
    EXPECT_EQ(trial[Numbered(100 + i)], expected) << i;
  }
  EXPECT_FALSE(sampler->Sample(int64_t{1} << 62).has_value());
}

TEST(GridSamplerTest, RefusesAProductBeyondInt64) {
  std::vector<Parameter> parameters;
  for (int i = 0; i < 63; ++i) {
    parameters.push_back(Values(Numbered(i), Kind::kCategorical, {0, 1}));
  }
  auto sampler = MakeGridSampler(Space(parameters));
  ASSERT_FALSE(sampler.ok());
  EXPECT_EQ(sampler.status().message(),
            "grid search space is too large: more than 2^63 points at 'p62'");
}

// ---- Random ----

SearchSpace MixedSpace() {
  return Space(
      {Range("lr", Kind::kLogUniform, 1e-5, 1e-1), Range("momentum", Kind::kUniform, 0.8, 0.99),
       Range("layers", Kind::kIntUniform, 1, 6), Range("batch", Kind::kLogIntUniform, 16, 512),
       Values("opt", Kind::kCategorical, {"adam", "sgd", "rmsprop"}),
       Values("epochs", Kind::kConstant, {10})});
}

TEST(RandomSamplerTest, IsInfiniteAndRefusesNegativeIndices) {
  auto sampler = MakeRandomSampler(MixedSpace(), 1);
  EXPECT_EQ(sampler->size(), std::nullopt);
  EXPECT_FALSE(sampler->Sample(-1).has_value());
  EXPECT_TRUE(sampler->Sample(int64_t{1} << 50).has_value());
}

TEST(RandomSamplerTest, SameSeedSameSequence) {
  auto a = MakeRandomSampler(MixedSpace(), 7);
  auto b = MakeRandomSampler(MixedSpace(), 7);
  for (int64_t i = 0; i < 200; ++i) EXPECT_EQ(*a->Sample(i), *b->Sample(i)) << i;
}

TEST(RandomSamplerTest, IndependentOfTheOrderTrialsAreDrawn) {
  auto sampler = MakeRandomSampler(MixedSpace(), 7);
  std::vector<json> forward;
  for (int64_t i = 0; i < 100; ++i) forward.push_back(*sampler->Sample(i));
  auto fresh = MakeRandomSampler(MixedSpace(), 7);
  for (int64_t i = 99; i >= 0; --i) {
    EXPECT_EQ(*fresh->Sample(i), forward[static_cast<size_t>(i)]) << i;
  }
  EXPECT_EQ(*sampler->Sample(42), forward[42]);  // asking twice changes nothing
}

TEST(RandomSamplerTest, AddingAParameterLeavesTheOthersUnchanged) {
  auto small = MakeRandomSampler(
      Space({Range("lr", Kind::kLogUniform, 1e-5, 1e-1), Range("layers", Kind::kIntUniform, 1, 6)}),
      3);
  auto large = MakeRandomSampler(
      Space({Values("opt", Kind::kCategorical, {"adam", "sgd"}),
             Range("lr", Kind::kLogUniform, 1e-5, 1e-1), Range("dropout", Kind::kUniform, 0, 0.5),
             Range("layers", Kind::kIntUniform, 1, 6)}),
      3);
  for (int64_t i = 0; i < 100; ++i) {
    json a = *small->Sample(i);
    json b = *large->Sample(i);
    EXPECT_EQ(a["lr"], b["lr"]) << i;
    EXPECT_EQ(a["layers"], b["layers"]) << i;
  }
}

TEST(RandomSamplerTest, DifferentSeedsDiffer) {
  auto a = MakeRandomSampler(MixedSpace(), 1);
  auto b = MakeRandomSampler(MixedSpace(), 2);
  int same_lr = 0;
  for (int64_t i = 0; i < 100; ++i) same_lr += (*a->Sample(i))["lr"] == (*b->Sample(i))["lr"];
  EXPECT_EQ(same_lr, 0);
}

TEST(RandomSamplerTest, ConsecutiveTrialsDiffer) {
  auto sampler = MakeRandomSampler(MixedSpace(), 1);
  std::set<double> lrs;
  for (int64_t i = 0; i < 1000; ++i) lrs.insert((*sampler->Sample(i))["lr"].get<double>());
  EXPECT_EQ(lrs.size(), 1000u);
}

// Pins the hash so a change that would silently re-draw every resumed sweep fails here.
// The value was computed independently from the documented recipe: splitmix64 over
// (seed, index, FNV-1a 64 of the name), top 53 bits.
TEST(RandomSamplerTest, DrawsArePinned) {
  auto sampler = MakeRandomSampler(Space({Range("x", Kind::kUniform, 0, 1)}), 0);
  EXPECT_EQ((*sampler->Sample(0))["x"].get<double>(), 0x1.d92798e78d107p-1);
  EXPECT_EQ((*sampler->Sample(1))["x"].get<double>(), 0x1.c45d9cc576082p-2);
}

TEST(RandomSamplerTest, EverySampleWithinBoundsAndTyped) {
  auto sampler = MakeRandomSampler(MixedSpace(), 12345);
  for (int64_t i = 0; i < 10000; ++i) {
    json t = *sampler->Sample(i);
    ASSERT_EQ(t.size(), 6u);
    ASSERT_TRUE(t["lr"].is_number_float());
    EXPECT_GE(t["lr"].get<double>(), 1e-5);
    EXPECT_LE(t["lr"].get<double>(), 1e-1);
    ASSERT_TRUE(t["momentum"].is_number_float());
    EXPECT_GE(t["momentum"].get<double>(), 0.8);
    EXPECT_LE(t["momentum"].get<double>(), 0.99);
    ASSERT_TRUE(t["layers"].is_number_integer());
    EXPECT_GE(t["layers"].get<int64_t>(), 1);
    EXPECT_LE(t["layers"].get<int64_t>(), 6);
    ASSERT_TRUE(t["batch"].is_number_integer());
    EXPECT_GE(t["batch"].get<int64_t>(), 16);
    EXPECT_LE(t["batch"].get<int64_t>(), 512);
    EXPECT_TRUE(t["opt"] == "adam" || t["opt"] == "sgd" || t["opt"] == "rmsprop") << t["opt"];
    EXPECT_EQ(t["epochs"], 10);
  }
}

TEST(RandomSamplerTest, UniformMeanNearMidpoint) {
  auto sampler = MakeRandomSampler(Space({Range("x", Kind::kUniform, -2, 6)}), 5);
  double sum = 0;
  for (int64_t i = 0; i < 10000; ++i) sum += (*sampler->Sample(i))["x"].get<double>();
  // Standard error of the mean is 8/sqrt(12)/100 = 0.023; 0.15 is over six of them.
  EXPECT_NEAR(sum / 10000, 2.0, 0.15);
}

TEST(RandomSamplerTest, LogUniformMedianNearGeometricMean) {
  auto sampler = MakeRandomSampler(Space({Range("lr", Kind::kLogUniform, 1e-5, 1e-1)}), 9);
  std::vector<double> draws;
  for (int64_t i = 0; i < 10000; ++i) draws.push_back((*sampler->Sample(i))["lr"].get<double>());
  std::nth_element(draws.begin(), draws.begin() + 5000, draws.end());
  // The geometric mean is 1e-3. A plain uniform draw would put the median near 0.05.
  EXPECT_NEAR(std::log10(draws[5000]), -3.0, 0.1);
  int below_1e4 = 0;
  for (double d : draws) below_1e4 += d < 1e-4;
  EXPECT_NEAR(below_1e4, 2500, 250);  // a quarter of the decades
}

TEST(RandomSamplerTest, SteppedRangesDrawEveryStepEvenly) {
  auto sampler = MakeRandomSampler(Space({Stepped("x", Kind::kUniform, 0.1, 0.5, 0.1),
                                          Stepped("bs", Kind::kIntUniform, 16, 64, 16)}),
                                   3);
  std::map<json, int> xs, sizes;
  for (int64_t i = 0; i < 8000; ++i) {
    const json trial = *sampler->Sample(i);
    ++xs[trial["x"]];
    ++sizes[trial["bs"]];
  }
  EXPECT_EQ(xs.size(), 5u);
  for (double v : {0.1, 0.2, 0.3, 0.4, 0.5}) EXPECT_NEAR(xs[json(v)], 1600, 200) << v;
  EXPECT_EQ(sizes.size(), 4u);
  for (int v : {16, 32, 48, 64}) EXPECT_NEAR(sizes[json(v)], 2000, 200) << v;
}

TEST(RandomSamplerTest, IntUniformReachesBothEndsEvenly) {
  auto sampler = MakeRandomSampler(Space({Range("n", Kind::kIntUniform, -3, 3)}), 11);
  std::map<int64_t, int> counts;
  for (int64_t i = 0; i < 7000; ++i) ++counts[(*sampler->Sample(i))["n"].get<int64_t>()];
  ASSERT_EQ(counts.size(), 7u);
  EXPECT_EQ(counts.begin()->first, -3);
  EXPECT_EQ(counts.rbegin()->first, 3);
  for (const auto& [value, count] : counts) EXPECT_NEAR(count, 1000, 150) << value;
}

// A range of more than 2^53 integers (bounds up to +-2^53 are accepted): a 53-bit uniform
// would reach only every second one of them, so no odd value would ever be drawn.
TEST(RandomSamplerTest, IntUniformWiderThan2To53ReachesOddValues) {
  const double big = 9007199254740992.0;  // 2^53
  auto sampler = MakeRandomSampler(Space({Range("n", Kind::kIntUniform, -big, big)}), 11);
  int odd = 0, negative = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const auto n = (*sampler->Sample(i))["n"].get<int64_t>();
    ASSERT_GE(n, -(int64_t{1} << 53));
    ASSERT_LE(n, int64_t{1} << 53);
    odd += n % 2 != 0;
    negative += n < 0;
  }
  EXPECT_NEAR(odd, 1000, 120);
  EXPECT_NEAR(negative, 1000, 120);
}

// A narrow range far from zero: each integer as likely as the next, both for int_uniform and,
// a range this narrow being nearly flat in log space too, for log_int_uniform (min + u * width
// in doubles had rounded to the doubles' spacing there, and exp(log(...)) to a few values).
TEST(RandomSamplerTest, NarrowIntRangesFarFromZeroAreEven) {
  for (const double lo : {9007199254740987.0, 4503599627370491.0, 1e15, 1e14}) {
    for (const Kind kind : {Kind::kIntUniform, Kind::kLogIntUniform}) {
      auto sampler = MakeRandomSampler(Space({Range("n", kind, lo, lo + 4)}), 3);
      std::map<int64_t, int> counts;
      for (int64_t i = 0; i < 5000; ++i) ++counts[(*sampler->Sample(i))["n"].get<int64_t>()];
      ASSERT_EQ(counts.size(), 5u) << lo;
      EXPECT_EQ(counts.begin()->first, static_cast<int64_t>(lo));
      for (const auto& [value, count] : counts) EXPECT_NEAR(count, 1000, 130) << value;
    }
  }
}

TEST(RandomSamplerTest, SinglePointIntRangeIsConstant) {
  auto sampler = MakeRandomSampler(
      Space({Range("n", Kind::kIntUniform, 4, 4), Range("m", Kind::kLogIntUniform, 1, 1)}), 11);
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_EQ((*sampler->Sample(i))["n"], 4);
    EXPECT_EQ((*sampler->Sample(i))["m"], 1);
  }
}

TEST(RandomSamplerTest, LogIntUniformReachesBothEndsAndFavoursSmallValues) {
  auto sampler = MakeRandomSampler(Space({Range("n", Kind::kLogIntUniform, 1, 64)}), 13);
  std::map<int64_t, int> counts;
  for (int64_t i = 0; i < 10000; ++i) ++counts[(*sampler->Sample(i))["n"].get<int64_t>()];
  EXPECT_EQ(counts.begin()->first, 1);
  EXPECT_EQ(counts.rbegin()->first, 64);
  // Mass of 1 is ln(1.5/0.5)/ln(64.5/0.5) = 0.226; of 64 it is ln(64.5/63.5)/ln(129) = 0.0032.
  EXPECT_NEAR(counts[1], 2260, 200);
  EXPECT_GT(counts[64], 0);
  EXPECT_LT(counts[64], 100);
}

TEST(RandomSamplerTest, CategoricalFrequenciesRoughlyUniform) {
  auto sampler =
      MakeRandomSampler(Space({Values("c", Kind::kCategorical, {"a", "b", "c", "d"})}), 17);
  std::map<std::string, int> counts;
  const int n = 10000;
  for (int64_t i = 0; i < n; ++i) ++counts[(*sampler->Sample(i))["c"].get<std::string>()];
  ASSERT_EQ(counts.size(), 4u);
  double chi2 = 0;
  for (const auto& [value, count] : counts) {
    const double expected = n / 4.0;
    chi2 += (count - expected) * (count - expected) / expected;
  }
  // Three degrees of freedom: P(chi2 > 30) is about 1e-6.
  EXPECT_LT(chi2, 30.0);
}

TEST(RandomSamplerTest, ListsAsCategoricalValues) {
  const json small = json::array({256});
  const json large = json::array({512, 256});
  auto sampler =
      MakeRandomSampler(Space({Values("hidden", Kind::kCategorical, {small, large})}), 19);
  int smalls = 0;
  int larges = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    json h = (*sampler->Sample(i))["hidden"];
    ASSERT_TRUE(h.is_array());
    smalls += h == small;
    larges += h == large;
  }
  EXPECT_EQ(smalls + larges, 1000);
  EXPECT_NEAR(smalls, 500, 100);
}

TEST(RandomSamplerTest, ParametersOfOneTrialAreUncorrelated) {
  auto sampler = MakeRandomSampler(
      Space({Range("a", Kind::kUniform, 0, 1), Range("b", Kind::kUniform, 0, 1)}), 23);
  const int n = 10000;
  double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
  for (int64_t i = 0; i < n; ++i) {
    json t = *sampler->Sample(i);
    const double a = t["a"].get<double>();
    const double b = t["b"].get<double>();
    sa += a;
    sb += b;
    sab += a * b;
    saa += a * a;
    sbb += b * b;
  }
  const double cov = sab / n - (sa / n) * (sb / n);
  const double corr = cov / std::sqrt((saa / n - sa * sa / n / n) * (sbb / n - sb * sb / n / n));
  EXPECT_LT(std::fabs(corr), 0.05);  // the standard error is 0.01
}

// ---- Conditional parameters ----

// Every distinct assignment of the active parameters, by brute force over the full product: the
// value index of each parameter in declaration order, -1 where inactive. A std::set orders them
// as the grid must (activity at a position is fixed by the earlier positions, so the first
// difference between two assignments is always between two values).
std::vector<json> BruteForceGrid(const SearchSpace& space) {
  const std::vector<Parameter>& ps = space.parameters();
  std::set<std::vector<int>> distinct;
  std::vector<int> digits(ps.size(), 0);
  for (;;) {
    std::vector<int> active(ps.size(), -1);
    for (size_t j = 0; j < ps.size(); ++j) {
      bool on = true;
      if (ps[j].condition) {
        on = false;
        for (size_t p = 0; p < j; ++p) {
          if (ps[p].name != ps[j].condition->parent || active[p] < 0) continue;
          const json& v = ps[p].distribution.values[static_cast<size_t>(active[p])];
          const auto& allowed = ps[j].condition->values;
          on = std::find(allowed.begin(), allowed.end(), v) != allowed.end();
        }
      }
      if (on) active[j] = digits[j];
    }
    distinct.insert(active);
    size_t k = ps.size();
    while (k > 0 && ++digits[k - 1] == static_cast<int>(ps[k - 1].distribution.values.size())) {
      digits[--k] = 0;
    }
    if (k == 0) break;
  }
  std::vector<json> trials;
  for (const std::vector<int>& a : distinct) {
    json t = json::object();
    for (size_t j = 0; j < ps.size(); ++j) {
      if (a[j] >= 0) t[ps[j].name] = ps[j].distribution.values[static_cast<size_t>(a[j])];
    }
    trials.push_back(t);
  }
  return trials;
}

void ExpectGridMatchesBruteForce(const SearchSpace& space) {
  auto sampler = Grid(space);
  ASSERT_NE(sampler, nullptr);
  const std::vector<json> expected = BruteForceGrid(space);
  ASSERT_EQ(sampler->size(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(*sampler->Sample(static_cast<int64_t>(i)), expected[i]) << i;
  }
  EXPECT_FALSE(sampler->Sample(static_cast<int64_t>(expected.size())).has_value());
}

TEST(ConditionalGridTest, ChildMultipliesOnlyItsBranch) {
  SearchSpace space =
      Space({Values("optimizer", Kind::kCategorical, {"sgd", "adamw"}),
             When(Values("momentum", Kind::kCategorical, {0.8, 0.9}), "optimizer", {"sgd"}),
             Values("lr", Kind::kCategorical, {0.1, 0.01})});
  auto sampler = Grid(space);
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), 6);  // (2 momenta + 1) * 2 rates, not 2 * 2 * 2
  const std::vector<json> expected = {
      {{"optimizer", "sgd"}, {"momentum", 0.8}, {"lr", 0.1}},
      {{"optimizer", "sgd"}, {"momentum", 0.8}, {"lr", 0.01}},
      {{"optimizer", "sgd"}, {"momentum", 0.9}, {"lr", 0.1}},
      {{"optimizer", "sgd"}, {"momentum", 0.9}, {"lr", 0.01}},
      {{"optimizer", "adamw"}, {"lr", 0.1}},
      {{"optimizer", "adamw"}, {"lr", 0.01}},
  };
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(*sampler->Sample(i), expected[static_cast<size_t>(i)]);
  EXPECT_FALSE(sampler->Sample(6).has_value());
  EXPECT_FALSE(sampler->Sample(4)->contains("momentum"));
}

TEST(ConditionalGridTest, NestedAndSiblingConditionsMatchBruteForce) {
  ExpectGridMatchesBruteForce(
      Space({Values("optimizer", Kind::kCategorical, {"sgd", "adam", "rmsprop"}),
             Values("batch", Kind::kCategorical, {32, 64}),
             When(Values("momentum", Kind::kCategorical, {0.0, 0.9, 0.99}), "optimizer",
                  {"sgd", "rmsprop"}),
             When(Values("nesterov", Kind::kCategorical, {true, false}), "momentum", {0.9, 0.99}),
             When(Values("beta2", Kind::kCategorical, {0.99, 0.999}), "optimizer", {"adam"}),
             Values("epochs", Kind::kConstant, {10}),
             When(Values("warmup", Kind::kCategorical, {0, 1, 5}), "batch", {64}),
             When(Values("amsgrad", Kind::kCategorical, {true, false}), "optimizer", {"adam"})}));
}

TEST(ConditionalGridTest, SteppedChildMultipliesOnlyItsBranch) {
  auto sampler = Grid(
      Space({Values("optimizer", Kind::kCategorical, {"sgd", "adamw"}),
             When(Stepped("momentum", Kind::kUniform, 0.8, 0.9, 0.05), "optimizer", {"sgd"})}));
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), 4);
  EXPECT_EQ(*sampler->Sample(1), (json{{"optimizer", "sgd"}, {"momentum", 0.85}}));
  EXPECT_EQ(*sampler->Sample(3), (json{{"optimizer", "adamw"}}));
}

TEST(ConditionalGridTest, ChildOfAConstantIsAlwaysThere) {
  ExpectGridMatchesBruteForce(
      Space({Values("epochs", Kind::kConstant, {27}),
             When(Values("schedule", Kind::kCategorical, {"cos", "step"}), "epochs", {27})}));
}

TEST(ConditionalGridTest, DecodesLargeIndicesWithoutEnumerating) {
  // A switch with two branches, each holding 30 binary parameters: 2^30 + 2^30 points.
  std::vector<Parameter> parameters = {Values("branch", Kind::kCategorical, {"a", "b"})};
  for (int i = 0; i < 60; ++i) {
    parameters.push_back(
        When(Values(Numbered(i), Kind::kCategorical, {0, 1}), "branch", {i < 30 ? "a" : "b"}));
  }
  auto sampler = Grid(Space(parameters));
  ASSERT_NE(sampler, nullptr);
  ASSERT_EQ(sampler->size(), int64_t{2} << 30);
  json last = *sampler->Sample((int64_t{2} << 30) - 1);
  EXPECT_EQ(last["branch"], "b");
  EXPECT_EQ(last.size(), 31u);
  for (int i = 30; i < 60; ++i) EXPECT_EQ(last[Numbered(i)], 1) << i;
  json first_b = *sampler->Sample(int64_t{1} << 30);
  EXPECT_EQ(first_b["branch"], "b");
  for (int i = 30; i < 60; ++i) EXPECT_EQ(first_b[Numbered(i)], 0) << i;
}

TEST(ConditionalGridTest, RefusesASizeBeyondInt64) {
  std::vector<Parameter> parameters = {Values("branch", Kind::kCategorical, {"a", "b"})};
  for (int i = 0; i < 63; ++i) {
    parameters.push_back(When(Values(Numbered(i), Kind::kCategorical, {0, 1}), "branch", {"a"}));
  }
  auto sampler = MakeGridSampler(Space(parameters));
  ASSERT_FALSE(sampler.ok());
  EXPECT_EQ(sampler.status().message(),
            "grid search space is too large: more than 2^63 points at 'branch'");
}

TEST(ConditionalGridTest, RefusesAContinuousChild) {
  auto sampler = MakeGridSampler(
      Space({Values("optimizer", Kind::kCategorical, {"sgd", "adamw"}),
             When(Range("momentum", Kind::kUniform, 0.8, 0.99), "optimizer", {"sgd"})}));
  ASSERT_FALSE(sampler.ok());
  EXPECT_EQ(sampler.status().message(),
            "grid search cannot enumerate 'momentum' (uniform without a step); give it "
            "`values = [...]` or a `step`");
}

SearchSpace ConditionalMixedSpace() {
  return Space(
      {Values("optimizer", Kind::kCategorical, {"sgd", "adamw", "rmsprop"}),
       Range("lr", Kind::kLogUniform, 1e-5, 1e-1),
       When(Range("momentum", Kind::kUniform, 0.8, 0.99), "optimizer", {"sgd"}),
       When(Values("nesterov", Kind::kCategorical, {true, false}), "optimizer", {"sgd"}),
       When(Range("beta2", Kind::kUniform, 0.9, 0.9999), "optimizer", {"adamw", "rmsprop"})});
}

TEST(ConditionalRandomTest, InactiveParametersAreAbsent) {
  auto sampler = MakeRandomSampler(ConditionalMixedSpace(), 5);
  std::map<std::string, int> seen;
  for (int64_t i = 0; i < 3000; ++i) {
    json t = *sampler->Sample(i);
    const std::string opt = t["optimizer"].get<std::string>();
    ++seen[opt];
    EXPECT_TRUE(t.contains("lr"));
    EXPECT_EQ(t.contains("momentum"), opt == "sgd") << t.dump();
    EXPECT_EQ(t.contains("nesterov"), opt == "sgd") << t.dump();
    EXPECT_EQ(t.contains("beta2"), opt != "sgd") << t.dump();
    EXPECT_EQ(t.size(), opt == "sgd" ? 4u : 3u);
  }
  for (const auto& [opt, n] : seen) EXPECT_NEAR(n, 1000, 150) << opt;
}

TEST(ConditionalRandomTest, ConditionsLeaveEveryDrawWhereItWas) {
  // The same parameters with no conditions: every value a conditional space shows must be the
  // one drawn here, and the unconditional parameters must not move at all.
  auto plain =
      MakeRandomSampler(Space({Values("optimizer", Kind::kCategorical, {"sgd", "adamw", "rmsprop"}),
                               Range("lr", Kind::kLogUniform, 1e-5, 1e-1),
                               Range("momentum", Kind::kUniform, 0.8, 0.99),
                               Values("nesterov", Kind::kCategorical, {true, false}),
                               Range("beta2", Kind::kUniform, 0.9, 0.9999)}),
                        9);
  auto conditional = MakeRandomSampler(ConditionalMixedSpace(), 9);
  auto without =
      MakeRandomSampler(Space({Values("optimizer", Kind::kCategorical, {"sgd", "adamw", "rmsprop"}),
                               Range("lr", Kind::kLogUniform, 1e-5, 1e-1)}),
                        9);
  for (int64_t i = 0; i < 500; ++i) {
    const json all = *plain->Sample(i);
    const json some = *conditional->Sample(i);
    for (const auto& [name, value] : some.items()) EXPECT_EQ(value, all[name]) << name << i;
    EXPECT_EQ(*without->Sample(i), (json{{"optimizer", some["optimizer"]}, {"lr", some["lr"]}}));
  }
}

TEST(ConditionalRandomTest, NestedConditionsFollowTheChain) {
  auto sampler = MakeRandomSampler(
      Space({Values("optimizer", Kind::kCategorical, {"sgd", "adamw"}),
             When(Values("momentum", Kind::kCategorical, {0.0, 0.9}), "optimizer", {"sgd"}),
             When(Range("dampening", Kind::kUniform, 0, 0.5), "momentum", {0.9})}),
      11);
  int deepest = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    json t = *sampler->Sample(i);
    const bool sgd = t["optimizer"] == "sgd";
    EXPECT_EQ(t.contains("momentum"), sgd);
    const bool damp = sgd && t["momentum"] == 0.9;
    EXPECT_EQ(t.contains("dampening"), damp) << t.dump();
    deepest += damp;
  }
  EXPECT_NEAR(deepest, 500, 100);
}

}  // namespace
}  // namespace sweep::search
