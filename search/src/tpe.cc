// The tree-structured Parzen estimator behind search/tpe.h: an incremental history of
// observations, and per suggestion two kernel mixtures (good, bad) built from it.
// Everything a suggestion uses is passed in or immutable; Suggest writes only locals.
// The model's types and the class are in tpe_model.h; one group's suggestion in tpe_mixture.cc.
#include "search/tpe.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "base/hash.h"
#include "tpe_model.h"

namespace sweep::search {
namespace internal::tpe {

using Kind = Distribution::Kind;
using nlohmann::json;

TpeSamplerImpl::TpeSamplerImpl(const SearchSpace& space, uint64_t seed, const TpeOptions& options,
                               bool maximize)
    : space_(space),
      seed_(seed),
      options_(options),
      maximize_(maximize),
      random_(MakeRandomSampler(space, seed)) {
  const std::vector<Parameter>& parameters = space_.parameters();
  dim_of_param_.assign(parameters.size(), -1);
  group_of_param_.assign(parameters.size(), -1);
  std::map<std::string, size_t> group_by_condition;  // multivariate: condition -> group
  for (size_t p = 0; p < parameters.size(); ++p) {
    const Parameter& parameter = parameters[p];
    if (parameter.distribution.kind == Kind::kConstant) continue;
    dim_of_param_[p] = static_cast<int>(dims_.size());
    dims_.push_back(MakeDim(p, parameter.distribution));
    size_t g = groups_.size();
    if (options_.multivariate) {
      std::string key;
      if (parameter.condition) {
        key = parameter.condition->parent + '\n' + json(parameter.condition->values).dump();
      }
      auto [it, added] = group_by_condition.emplace(key, g);
      g = it->second;
      if (added) groups_.push_back({g, {}, Fnv1a64(parameter.name)});
    } else {
      groups_.push_back({g, {}, Fnv1a64(parameter.name)});
    }
    groups_[g].dims.push_back(dims_.size() - 1);
    if (dims_.back().type != Dim::Type::kContinuous) groups_[g].continuous = false;
    group_of_param_[p] = static_cast<int>(g);
    group_of_dim_.push_back(static_cast<int>(g));
  }
  if (!options_.multivariate) sorted_.resize(dims_.size());
  if (options_.multivariate) row_terms_.resize(groups_.size());
}

void TpeSamplerImpl::Observe(int64_t trial, const json& params, double value) {
  const double score = std::isnan(value) ? kInf : (maximize_ ? -value : value);
  const size_t width = dims_.size();
  auto at = std::lower_bound(by_trial_.begin(), by_trial_.end(), std::make_pair(trial, 0u));
  uint32_t row;
  if (at != by_trial_.end() && at->first == trial) {
    row = at->second;  // observed before: replace
    Unindex(trial, row);
  } else {
    row = static_cast<uint32_t>(trial_.size());
    trial_.push_back(trial);
    score_.push_back(0);
    x_.resize(x_.size() + width, kNaN);
    by_trial_.insert(at, {trial, row});
  }
  score_[row] = score;
  Parse(params, &x_[row * width]);
  by_score_.insert(std::tuple(score, trial, row));
  for (size_t d = 0; d < sorted_.size(); ++d) {
    const double x = x_[row * width + d];
    if (std::isnan(x) || dims_[d].type == Dim::Type::kCategorical) continue;
    auto& index = sorted_[d];
    const SortedEntry entry{x, trial, row};
    index.insert(std::lower_bound(index.begin(), index.end(), entry), entry);
  }
  for (RowTermTable& table : row_terms_) {
    table.active += Active(groups_[&table - row_terms_.data()], &x_[row * width]);
  }
  KeepRowTerms(row);
}

// Takes trial's row out of the indexes by score and value, and out of the active counts.
void TpeSamplerImpl::Unindex(int64_t trial, uint32_t row) {
  const size_t width = dims_.size();
  for (RowTermTable& table : row_terms_) {
    table.active -= Active(groups_[&table - row_terms_.data()], &x_[row * width]);
  }
  by_score_.erase(std::tuple(score_[row], trial, row));
  for (size_t d = 0; d < sorted_.size(); ++d) {
    const double x = x_[row * width + d];
    if (std::isnan(x) || dims_[d].type == Dim::Type::kCategorical) continue;
    auto& index = sorted_[d];
    index.erase(std::lower_bound(index.begin(), index.end(), SortedEntry{x, trial, row}));
  }
}

void TpeSamplerImpl::Forget(int64_t trial) {
  const size_t width = dims_.size();
  auto at = std::lower_bound(by_trial_.begin(), by_trial_.end(), std::make_pair(trial, 0u));
  if (at == by_trial_.end() || at->first != trial) return;
  const uint32_t row = at->second;
  by_trial_.erase(at);
  Unindex(trial, row);
  // The last row moves into the hole. Rows are only ever visited by trial or by score, so
  // where a row lies changes no suggestion.
  const auto last = static_cast<uint32_t>(trial_.size() - 1);
  if (row != last) {
    const int64_t moved = trial_[last];
    std::lower_bound(by_trial_.begin(), by_trial_.end(), std::make_pair(moved, 0u))->second = row;
    by_score_.erase(std::tuple(score_[last], moved, last));
    by_score_.insert(std::tuple(score_[last], moved, row));
    for (size_t d = 0; d < sorted_.size(); ++d) {
      const double x = x_[last * width + d];
      if (std::isnan(x) || dims_[d].type == Dim::Type::kCategorical) continue;
      auto& index = sorted_[d];
      std::lower_bound(index.begin(), index.end(), SortedEntry{x, moved, last})->row = row;
    }
    trial_[row] = moved;
    score_[row] = score_[last];
    std::copy_n(&x_[last * width], width, &x_[row * width]);
    for (RowTermTable& table : row_terms_) {
      table.log_mass[row] = table.log_mass[last];
      table.quad[row] = table.quad[last];
    }
  }
  trial_.pop_back();
  score_.pop_back();
  x_.resize(x_.size() - width);
  if (trial_.empty()) {
    for (RowTermTable& table : row_terms_) table = {};
  } else {
    KeepRowTerms(0);  // the bad set's bandwidth may move with its size
  }
}

void TpeSamplerImpl::Reset() {
  trial_.clear();
  score_.clear();
  x_.clear();
  by_trial_.clear();
  by_score_.clear();
  for (auto& index : sorted_) index.clear();
  for (RowTermTable& table : row_terms_) table = {};
}

Suggestion TpeSamplerImpl::Suggest(int64_t trial, const std::vector<json>& running,
                                   size_t running_observed, bool provisional) const {
  // Running trials count towards the startup trials: with N at once, the first
  // n_startup_trials trials are still random search's, as one at a time. Each trial once.
  const size_t trials_known =
      trial_.size() + running.size() - std::min(running_observed, running.size());
  const size_t width = dims_.size();
  const size_t n_observed = trial_.size();
  if (static_cast<int64_t>(trials_known) < options_.n_startup_trials) {
    return {random_->Sample(trial).value_or(json::object()), Suggestion::Source::kStartupRandom};
  }
  std::vector<double> running_x(running.size() * width, kNaN);
  for (size_t r = 0; r < running.size(); ++r) Parse(running[r], &running_x[r * width]);
  const size_t known = provisional ? std::min(running_observed, running.size()) : 0;
  const Rows rows{x_.data(), running_x.data(), n_observed, width, running.size(), known};

  // The good set: the best n_below observations, with their rank (1 the best; 0 for the rest);
  // running trials are always bad (also, where observed, good). Each trial counts once in
  // gamma's n where the values are provisional. With early stopping a running trial observed
  // at a rung counts twice, as it always has: the sweeps the BOHB rule was checked on.
  const size_t n_below = std::min(GoodCount(n_observed + running.size() - known), n_observed);
  std::vector<uint32_t> good_rank(n_observed, 0);
  auto it = by_score_.begin();
  for (size_t i = 0; i < n_below; ++i, ++it) {
    good_rank[std::get<2>(*it)] = static_cast<uint32_t>(i + 1);
  }

  // No duplicate of a running trial. Groups are sampled in declaration order, and a
  // condition's parent precedes it; a running trial "matches" while it equals the point on
  // every group sampled or left out so far. In group g, a matching running trial blocks the
  // candidates equal to it there when g is the last group active in it: taking one would make
  // the whole point that trial's. Should some group have only blocked values (the running
  // trials agree on every earlier group and cover all its values), the point is sampled again
  // with every matching running trial active in a group blocking there, so that it leaves
  // them at the first group it can.
  std::vector<int> last_group(running.size(), -1);  // the last group active in each
  for (size_t r = 0; r < running.size(); ++r) {
    const double* x = rows.Row(static_cast<uint32_t>(n_observed + r));
    for (size_t d = 0; d < width; ++d) {
      if (!std::isnan(x[d])) last_group[r] = std::max(last_group[r], group_of_dim_[d]);
    }
  }
  const std::vector<Parameter>& parameters = space_.parameters();
  std::vector<char> matching(running.size());
  std::vector<uint32_t> blockers;
  std::vector<double> chosen(width);
  std::vector<char> done(groups_.size());
  json params;
  auto assemble = [&](bool strict) {
    bool distinct = true;
    std::fill(matching.begin(), matching.end(), 1);
    std::fill(chosen.begin(), chosen.end(), kNaN);
    std::fill(done.begin(), done.end(), 0);
    params = json::object();
    for (size_t p = 0; p < parameters.size(); ++p) {
      const Parameter& parameter = parameters[p];
      if (parameter.condition) {
        // Parents come first, so their value (or absence) is already decided.
        auto parent = params.find(parameter.condition->parent);
        const auto& allowed = parameter.condition->values;
        if (parent == params.end() ||
            std::find(allowed.begin(), allowed.end(), *parent) == allowed.end()) {
          // Left out: a running trial that has this parameter differs from the point.
          if (dim_of_param_[p] >= 0) {
            const auto d = static_cast<size_t>(dim_of_param_[p]);
            for (size_t r = 0; r < running.size(); ++r) {
              if (!std::isnan(rows.Row(static_cast<uint32_t>(n_observed + r))[d])) {
                matching[r] = 0;
              }
            }
          }
          continue;
        }
      }
      if (group_of_param_[p] < 0) {
        params[parameter.name] =
            parameter.distribution.values.empty() ? json() : parameter.distribution.values[0];
        continue;
      }
      const auto g = static_cast<size_t>(group_of_param_[p]);
      if (!done[g]) {
        const Group& group = groups_[g];
        blockers.clear();
        for (size_t r = 0; r < running.size(); ++r) {
          const int last = last_group[r], here = static_cast<int>(g);
          if (matching[r] && (last == here || (strict && last > here))) {
            blockers.push_back(static_cast<uint32_t>(n_observed + r));
          }
        }
        distinct = SampleGroup(group, trial, rows, running.size(), good_rank, blockers, chosen) &&
                   distinct;
        done[g] = 1;
        for (size_t r = 0; r < running.size(); ++r) {
          const double* x = rows.Row(static_cast<uint32_t>(n_observed + r));
          for (size_t d : group.dims) {
            if (!(x[d] == chosen[d])) matching[r] = 0;  // NaN (inactive there) differs too
          }
        }
      }
      const auto d = static_cast<size_t>(dim_of_param_[p]);
      params[parameter.name] = Output(dims_[d], chosen[d]);
    }
    return distinct;
  };
  if (!assemble(false)) assemble(true);
  return {std::move(params), Suggestion::Source::kTpe};
}

Dim TpeSamplerImpl::MakeDim(size_t p, const Distribution& d) {
  Dim dim;
  dim.param = p;
  dim.min = d.min;
  dim.max = d.max;
  switch (d.kind) {
    case Kind::kCategorical:
    case Kind::kConstant:
      dim.type = Dim::Type::kCategorical;
      dim.count = static_cast<double>(d.values.size());
      return dim;
    case Kind::kLogUniform:
      dim.log = true;
      dim.lo = std::log(d.min);
      dim.hi = std::log(d.max);
      return dim;
    case Kind::kLogIntUniform:
      dim.type = Dim::Type::kLogInt;
      dim.lo = std::log(d.min - 0.5);
      dim.hi = std::log(d.max + 0.5);
      return dim;
    case Kind::kUniform:
      if (d.step <= 0) {
        dim.lo = d.min;
        dim.hi = d.max;
        return dim;
      }
      break;
    case Kind::kIntUniform:
      break;
  }
  dim.type = Dim::Type::kDiscrete;
  dim.grid_min = d.min;
  dim.step = d.step > 0 ? d.step : 1;
  dim.count = d.step > 0 ? static_cast<double>(StepCount(d)) : d.max - d.min + 1;
  dim.lo = d.min - 0.5 * dim.step;
  dim.hi = d.min + (dim.count - 1) * dim.step + 0.5 * dim.step;
  return dim;
}

// A value as given to internal coordinates, NaN when it cannot be used.
double TpeSamplerImpl::Internal(const Dim& dim, const json& v) const {
  if (dim.type == Dim::Type::kCategorical) {
    const auto& values = space_.parameters()[dim.param].distribution.values;
    auto found = std::find(values.begin(), values.end(), v);
    return found == values.end() ? kNaN : static_cast<double>(found - values.begin());
  }
  if (!v.is_number()) return kNaN;
  const double x = v.get<double>();
  if (!std::isfinite(x)) return kNaN;
  switch (dim.type) {
    case Dim::Type::kContinuous: {
      const double clamped = std::clamp(x, dim.min, dim.max);
      return dim.log ? std::log(clamped) : clamped;
    }
    case Dim::Type::kDiscrete:
      return Snap(dim, x);
    case Dim::Type::kLogInt:
      return std::log(std::clamp(std::round(x), dim.min, dim.max));
    case Dim::Type::kCategorical:
      break;
  }
  return kNaN;
}

// Internal coordinates back to the value a trial gets.
json TpeSamplerImpl::Output(const Dim& dim, double y) const {
  const Distribution& d = space_.parameters()[dim.param].distribution;
  switch (dim.type) {
    case Dim::Type::kContinuous:
      return std::clamp(dim.log ? std::exp(y) : y, dim.min, dim.max);
    case Dim::Type::kDiscrete: {
      const double k = std::clamp(std::round((y - dim.grid_min) / dim.step), 0.0, dim.count - 1);
      if (d.step > 0) return StepValue(d, static_cast<int64_t>(k));
      return static_cast<int64_t>(d.min) + static_cast<int64_t>(k);
    }
    case Dim::Type::kLogInt:
      return static_cast<int64_t>(std::clamp(std::round(std::exp(y)), dim.min, dim.max));
    case Dim::Type::kCategorical: {
      const auto i = static_cast<size_t>(std::clamp(y, 0.0, dim.count - 1));
      return d.values[i];
    }
  }
  return json();
}

void TpeSamplerImpl::Parse(const json& params, double* row) const {
  if (!params.is_object()) return;
  for (size_t d = 0; d < dims_.size(); ++d) {
    auto it = params.find(space_.parameters()[dims_[d].param].name);
    row[d] = it == params.end() ? kNaN : Internal(dims_[d], *it);
  }
}

// min(ceil(gamma * n), gamma_max); the 1e-12 keeps 0.1 * 30 = 3.0000000000000004 at 3.
size_t TpeSamplerImpl::GoodCount(size_t n) const {
  const double good = std::ceil(options_.gamma * static_cast<double>(n) * (1 - 1e-12));
  return std::min(static_cast<size_t>(good), static_cast<size_t>(options_.gamma_max));
}

}  // namespace internal::tpe

namespace {

// Shortest text that reads back as the same number ("nan" for NaN).
std::string Show(double x) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), x);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(x);
}
std::string Show(int64_t x) { return std::to_string(x); }

template <typename T>
Status Refuse(std::string_view key, std::string_view rule, T got) {
  std::string text = "search.";
  text += key;
  text += ": must be ";
  text += rule;
  text += " (got " + Show(got) + ")";
  return Status::InvalidArgument(text);
}

}  // namespace

Status Validate(const TpeOptions& o) {
  if (o.n_startup_trials < 0) return Refuse("n_startup_trials", ">= 0", o.n_startup_trials);
  if (o.n_ei_candidates < 1) return Refuse("n_ei_candidates", ">= 1", o.n_ei_candidates);
  // One draw costs a pass over every kernel: beyond this a suggestion takes seconds.
  if (o.n_ei_candidates > 100000) {
    return Refuse("n_ei_candidates", "<= 100000", o.n_ei_candidates);
  }
  if (!(o.gamma > 0 && o.gamma <= 1)) return Refuse("gamma", "in (0, 1]", o.gamma);
  if (o.gamma_max < 1) return Refuse("gamma_max", ">= 1", o.gamma_max);
  if (!(o.prior_weight > 0) || !std::isfinite(o.prior_weight)) {
    return Refuse("prior_weight", "a finite number > 0", o.prior_weight);
  }
  return Status::Ok();
}

std::string_view SourceName(Suggestion::Source source) {
  return source == Suggestion::Source::kTpe ? "tpe" : "startup random";
}

Result<std::unique_ptr<TpeSampler>> MakeTpeSampler(const SearchSpace& space, uint64_t seed,
                                                   const TpeOptions& options, bool maximize) {
  SWEEP_RETURN_IF_ERROR(Validate(options));
  return std::unique_ptr<TpeSampler>(
      std::make_unique<internal::tpe::TpeSamplerImpl>(space, seed, options, maximize));
}

}  // namespace sweep::search
