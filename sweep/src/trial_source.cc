#include "trial_source.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace sweep {

using nlohmann::json;

namespace {
// order = "longest_first" draws the sweep ahead, up to this many trials at a time.
constexpr size_t kMaxDrawnAhead = 100000;
}  // namespace

Result<std::unique_ptr<TrialSource>> TrialSource::Make(const SweepConfig& config,
                                                       std::function<double(const json&)> work,
                                                       std::vector<double> rungs) {
  std::unique_ptr<TrialSource> source(new TrialSource(config));
  source->work_ = std::move(work);
  SWEEP_ASSIGN_OR_RETURN(source->sampler_, MakeSampler(config));
  if (config.search.algorithm == "tpe") {
    SWEEP_ASSIGN_OR_RETURN(source->tpe_,
                           search::MakeTpeSampler(config.search.space, config.sweep.seed,
                                                  config.search.tpe, config.sweep.maximize));
    // What TPE learns from (the BOHB rule): the values at each rung, then the trials' ends.
    for (double rung : rungs) source->tpe_values_[rung];
    source->tpe_values_[std::numeric_limits<double>::infinity()];
    source->tpe_exact_levels_ = config.early_stopping.algorithm == search::EarlyStopping::kMedian;
    source->tpe_provisional_ = config.early_stopping.algorithm == search::EarlyStopping::kNone;
  }
  return source;
}

int64_t TrialSource::TrialLimit() const {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return config_.sweep.max_trials > kMax - carried_ ? kMax : carried_ + config_.sweep.max_trials;
}

bool TrialSource::Left() const {
  return !gaps_.empty() || !ahead_.empty() || (!exhausted_ && next_number_ < TrialLimit());
}

void TrialSource::SetCarried(int64_t carried, int64_t sample_shift) {
  carried_ = carried;
  sample_shift_ = sample_shift;
  next_number_ = std::max(next_number_, carried);
}

void TrialSource::CarriedPoint(const std::string& params_json) {
  carried_points_.insert(
      search::PointKey(json::parse(params_json, nullptr, /*allow_exceptions=*/false)));
}

void TrialSource::ContinueAfter(int64_t max_number, const std::vector<bool>& started) {
  next_number_ = max_number + 1;
  for (int64_t n = 0; n < next_number_; ++n) {
    if (static_cast<size_t>(n) >= started.size() || !started[static_cast<size_t>(n)]) {
      gaps_.push_back(n);
    }
  }
}

// The sampler's point for trial `number`: n + sample_shift_; for a grid that carried points
// over, trial carried_ + k is its k-th point not carried (so none runs twice, and numbers have
// no gaps), found by walking the grid once.
std::optional<json> TrialSource::SampleFor(int64_t number) {
  if (carried_points_.empty()) return sampler_->Sample(number + sample_shift_);
  const int64_t k = number - carried_;
  while (static_cast<int64_t>(fresh_points_.size()) <= k) {
    std::optional<json> p = sampler_->Sample(grid_cursor_);
    if (!p) return std::nullopt;
    if (!carried_points_.contains(search::PointKey(*p))) fresh_points_.push_back(grid_cursor_);
    ++grid_cursor_;
  }
  return sampler_->Sample(fresh_points_[static_cast<size_t>(k)]);
}

std::optional<NewTrial> TrialSource::Draw(const Pending& pending) {
  const bool gap = !gaps_.empty();
  if (!gap && (exhausted_ || next_number_ >= TrialLimit())) return std::nullopt;
  const int64_t number = gap ? gaps_.front() : next_number_;
  std::optional<json> params =
      tpe_ != nullptr ? std::optional<json>(SuggestTpe(number, pending())) : SampleFor(number);
  if (gap) {
    gaps_.pop_front();
  } else if (params) {
    ++next_number_;
  } else {
    exhausted_ = true;
  }
  if (!params) return std::nullopt;
  return NewTrial{number, std::move(*params)};
}

std::optional<NewTrial> TrialSource::Next(const Pending& pending) {
  if (!config_.trial.longest_first) {
    while (!gaps_.empty() || (!exhausted_ && next_number_ < TrialLimit())) {
      if (std::optional<NewTrial> p = Draw(pending)) return p;
    }
    return std::nullopt;
  }
  while (ahead_.size() < kMaxDrawnAhead) {
    std::optional<NewTrial> p = Draw(pending);
    if (!p) {
      if (gaps_.empty() && (exhausted_ || next_number_ >= TrialLimit())) break;
      continue;
    }
    ahead_.emplace(std::make_pair(-work_(p->params), p->number), std::move(p->params));
  }
  if (ahead_.empty()) return std::nullopt;
  auto first = ahead_.begin();
  NewTrial p{first->first.second, std::move(first->second)};
  ahead_.erase(first);
  return p;
}

// TPE's proposal for trial `number`, from the observations at the level TpeLevel picks, with
// the trials running or waiting to run again as pessimistic ones (the constant liar). One of
// those with a value at that level (a rung it passed) is both, and counts once towards
// n_startup_trials.
json TrialSource::SuggestTpe(int64_t number, std::vector<NewTrial> pending) {
  const std::optional<double> level = TpeLevel();
  if (level != tpe_fed_) {
    // A higher level has enough values now: TPE learns from it instead (rare: once a level).
    tpe_->Reset();
    for (const auto& [trial, value] : tpe_values_.at(*level)) {
      tpe_->Observe(trial, tpe_params_[trial], value);
    }
    tpe_fed_ = level;
    provisional_.clear();
  }
  const std::map<int64_t, double>& observed = tpe_values_.at(*level);
  size_t running_observed = 0;
  if (tpe_provisional_) {
    KeepProvisional(pending);
    // Those with a provisional value first, as Suggest takes them.
    const auto known =
        std::stable_partition(pending.begin(), pending.end(),
                              [&](const NewTrial& t) { return provisional_.contains(t.number); });
    running_observed = static_cast<size_t>(known - pending.begin());
  } else {
    for (const NewTrial& t : pending) running_observed += observed.contains(t.number) ? 1 : 0;
  }
  std::vector<json> running;
  running.reserve(pending.size());
  for (NewTrial& t : pending) running.push_back(std::move(t.params));
  // Its random draws go on after the earlier sweep's too (run --from), as random search's do.
  search::Suggestion s =
      tpe_->Suggest(number + sample_shift_, running, running_observed, tpe_provisional_);
  proposed_by_[number] = std::string(search::SourceName(s.source));
  tpe_params_[number] = s.params;
  return std::move(s.params);
}

void TrialSource::KeepProvisional(const std::vector<NewTrial>& pending) {
  std::set<int64_t> now;
  for (const NewTrial& t : pending) now.insert(t.number);
  // A trial no longer pending that did not end completed (NoteEnd takes those) failed: its
  // reports are not a result, and TPE learns no failed trial's value.
  for (auto it = provisional_.begin(); it != provisional_.end();) {
    if (now.contains(it->first)) {
      ++it;
      continue;
    }
    tpe_->Forget(it->first);
    it = provisional_.erase(it);
  }
  std::erase_if(latest_, [&](const auto& entry) { return !now.contains(entry.first); });
  for (const NewTrial& t : pending) {
    auto latest = latest_.find(t.number);
    if (latest == latest_.end()) continue;  // NoteEnd erased an ended trial's
    const double value = latest->second.second;
    auto held = provisional_.find(t.number);
    if (held == provisional_.end() || held->second != value) {
      tpe_->Observe(t.number, t.params, value);
      provisional_[t.number] = value;
    }
  }
}

// The highest level (rung, or the trials' ends) with n_startup_trials values; else the one with
// the most (the lowest of those tied): the first rung, where trials report.
std::optional<double> TrialSource::TpeLevel() const {
  const size_t enough =
      static_cast<size_t>(std::max<int64_t>(1, config_.search.tpe.n_startup_trials));
  for (auto it = tpe_values_.rbegin(); it != tpe_values_.rend(); ++it) {
    if (it->second.size() >= enough) return it->first;
  }
  std::optional<double> most;
  size_t most_values = 0;
  for (const auto& [level, values] : tpe_values_) {
    if (!most || values.size() > most_values) most = level, most_values = values.size();
  }
  return most;
}

void TrialSource::NoteParams(int64_t trial, const json& params) {
  if (tpe_ != nullptr) tpe_params_[trial] = params;
}

void TrialSource::NoteReport(int64_t trial, double resource, double value, const json& params) {
  if (tpe_ == nullptr) return;
  if (!tpe_params_.contains(trial)) tpe_params_[trial] = params;
  if (tpe_provisional_) {
    // Kept until the trial ends; the highest resource wins (a rerun going over its steps again
    // reports lower ones).
    if (tpe_values_.at(std::numeric_limits<double>::infinity()).contains(trial)) return;
    auto [at, fresh] = latest_.try_emplace(trial, resource, value);
    if (!fresh && resource >= at->second.first) at->second = {resource, value};
    return;
  }
  auto note = [&](double level, std::map<int64_t, double>& values) {
    if (values.emplace(trial, value).second && level == tpe_fed_) {
      tpe_->Observe(trial, tpe_params_[trial], value);
    }
  };
  if (tpe_exact_levels_) {
    if (std::isfinite(resource)) note(resource, tpe_values_[resource]);
    return;
  }
  for (auto& [level, values] : tpe_values_) {
    if (std::isinf(level) || resource < level) break;
    note(level, values);
  }
}

void TrialSource::NoteEnd(int64_t trial, double value, const json& params) {
  if (tpe_ == nullptr) return;
  tpe_params_[trial] = params;
  constexpr double kEnd = std::numeric_limits<double>::infinity();
  tpe_values_[kEnd][trial] = value;
  latest_.erase(trial);
  if (tpe_fed_ == kEnd) {
    tpe_->Observe(trial, params, value);  // replaces a provisional value
    provisional_.erase(trial);
  }
}

std::string TrialSource::TakeProposer(int64_t number) {
  auto by = proposed_by_.find(number);
  if (by == proposed_by_.end()) return "";
  std::string said = std::move(by->second);
  proposed_by_.erase(by);
  return said;
}

}  // namespace sweep
