// Random search: every value is hashed from (seed, trial index, parameter name), so trial i is
// the same whatever order trials are drawn in and whatever other parameters the space holds.
// A RandomSampler is immutable after construction and safe to call from several threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/hash.h"
#include "search/space.h"

namespace sweep::search {
namespace {

// 64 random bits from (seed, trial index, parameter name) alone.
uint64_t Bits(uint64_t seed, int64_t index, uint64_t name_hash) {
  uint64_t h = SplitMix64(seed);
  h = SplitMix64(h ^ static_cast<uint64_t>(index));
  return SplitMix64(h ^ name_hash);
}

constexpr double kTwoTo53 = 9007199254740992.0;

// A draw from d, from 64 random bits: u, their top 53 as a uniform in [0, 1), serves every
// distribution but an integer range of more than 2^53 values, whose every integer needs all 64.
nlohmann::json Draw(const Distribution& d, uint64_t bits) {
  const double u = UnitInterval(bits);
  if (const int64_t n = StepCount(d); n > 0) {
    // One of the n values, each equally likely (n <= 2^53 + 1, so u * n loses no value).
    const double k = std::floor(u * static_cast<double>(n));
    return StepValue(d, static_cast<int64_t>(std::clamp(k, 0.0, static_cast<double>(n - 1))));
  }
  using DistKind = Distribution::Kind;
  switch (d.kind) {
    case DistKind::kConstant:
      return d.values.empty() ? nlohmann::json() : d.values[0];
    case DistKind::kCategorical: {
      if (d.values.empty()) return nlohmann::json();
      const size_t n = d.values.size();
      const auto i = static_cast<size_t>(u * static_cast<double>(n));
      return d.values[std::min(i, n - 1)];
    }
    case DistKind::kUniform:
      // u < 1, but rounding can still land a hair outside [min, max].
      return std::clamp(d.min + u * (d.max - d.min), d.min, d.max);
    case DistKind::kLogUniform: {
      const double lo = std::log(d.min);
      const double hi = std::log(d.max);
      return std::clamp(std::exp(lo + u * (hi - lo)), d.min, d.max);
    }
    case DistKind::kIntUniform: {
      // Bounds lie within +-2^53 (SearchSpace refuses others), so they and the width are exact.
      const auto lo = static_cast<int64_t>(d.min), hi = static_cast<int64_t>(d.max);
      const uint64_t width = static_cast<uint64_t>(hi - lo) + 1;
      if (static_cast<double>(width) > kTwoTo53) {
        // floor(width * bits / 2^64): every integer of the range reachable, equally likely to
        // within 2^-10 of its share.
        __extension__ using Wide = unsigned __int128;
        return lo + static_cast<int64_t>((static_cast<Wide>(bits) * width) >> 64);
      }
      // The offset from lo in doubles, then added as an integer: min + u * width in doubles
      // would round to the spacing of doubles near min (0.5 at 2^51), starving the low end.
      const double offset = std::floor(u * static_cast<double>(width));
      return lo + static_cast<int64_t>(std::clamp(offset, 0.0, static_cast<double>(width - 1)));
    }
    case DistKind::kLogIntUniform: {
      // Log-uniform on [min - 0.5, max + 0.5], rounded: widening by half a unit each side gives
      // the end integers their fair share of mass. As an offset from min - 0.5, with log1p and
      // expm1, so that a narrow range far from 0 (1e15 to 1e15 + 4) keeps its resolution.
      const auto lo = static_cast<int64_t>(d.min), hi = static_cast<int64_t>(d.max);
      const double base = d.min - 0.5;
      const double width = static_cast<double>(hi - lo) + 1;
      const double offset = std::floor(base * std::expm1(u * std::log1p(width / base)));
      return lo + static_cast<int64_t>(std::clamp(offset, 0.0, width - 1));
    }
  }
  return nlohmann::json();
}

class RandomSampler final : public Sampler {
 public:
  RandomSampler(const SearchSpace& space, uint64_t seed) : seed_(seed) {
    const std::vector<Parameter>& parameters = space.parameters();
    for (const Parameter& parameter : parameters) {
      Entry entry{parameter, Fnv1a64(parameter.name), -1};
      if (parameter.condition) {
        // SearchSpace::Add put the parent earlier; an unknown one leaves the child inactive.
        for (size_t p = 0; p < entries_.size(); ++p) {
          if (entries_[p].parameter.name == parameter.condition->parent) {
            entry.parent = static_cast<int>(p);
          }
        }
      }
      entries_.push_back(std::move(entry));
    }
  }

  std::optional<nlohmann::json> Sample(int64_t index) const override {
    if (index < 0) return std::nullopt;
    nlohmann::json trial = nlohmann::json::object();
    // Drawn values by declaration index; null while a parameter is inactive. They point into
    // `trial`, whose object is a std::map: its nodes stay put as keys are added.
    std::vector<const nlohmann::json*> drawn(entries_.size(), nullptr);
    for (size_t j = 0; j < entries_.size(); ++j) {
      const Entry& entry = entries_[j];
      if (entry.parameter.condition) {
        if (entry.parent < 0) continue;
        const nlohmann::json* parent_value = drawn[static_cast<size_t>(entry.parent)];
        const auto& allowed = entry.parameter.condition->values;
        if (parent_value == nullptr ||
            std::find(allowed.begin(), allowed.end(), *parent_value) == allowed.end()) {
          continue;
        }
      }
      // The draw depends on (seed, index, name) only, never on which other parameters are
      // active, so conditions do not shift anyone else's values.
      nlohmann::json& slot = trial[entry.parameter.name];
      slot = Draw(entry.parameter.distribution, Bits(seed_, index, entry.name_hash));
      drawn[j] = &slot;
    }
    return trial;
  }

  std::optional<int64_t> size() const override { return std::nullopt; }

 private:
  struct Entry {
    Parameter parameter;
    uint64_t name_hash;
    int parent;  // declaration index of the condition's parent; -1 when none
  };
  uint64_t seed_;
  std::vector<Entry> entries_;
};

}  // namespace

std::unique_ptr<Sampler> MakeRandomSampler(const SearchSpace& space, uint64_t seed) {
  return std::make_unique<RandomSampler>(space, seed);
}

}  // namespace sweep::search
