// Where new trials come from: the sampler (grid, random) or TPE, numbered in order, with the
// numbers a resume found never started first, and with order = "longest_first" the most work
// first. A sweep started `--from` another skips the points it carried over.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "search/space.h"
#include "search/tpe.h"
#include "sweep/config.h"

namespace sweep {

struct NewTrial {
  int64_t number = 0;
  nlohmann::json params;
};

class TrialSource {
 public:
  // `config` outlives the source and may have its budget raised (max_trials) meanwhile.
  // `work`: the work a trial's parameters make (for longest_first). `rungs`: early stopping's
  // rung resources (empty without it), the levels TPE learns at.
  static Result<std::unique_ptr<TrialSource>> Make(
      const SweepConfig& config, std::function<double(const nlohmann::json&)> work,
      std::vector<double> rungs);

  // The number below which new trials may start: carried-over ones do not count.
  int64_t TrialLimit() const;
  // Whether a new trial may still come: a number left unstarted, one drawn ahead, or a next.
  bool Left() const;
  // The number the next trial would get, for a placement request.
  int64_t next_number() const { return next_number_; }
  // The trials running or waiting to run again: TPE's pessimistic observations (those with a
  // value at the level it learns from are real ones too, and count once towards its startup).
  using Pending = std::function<std::vector<NewTrial>()>;
  // The next new trial; none when the search or the budget is done.
  std::optional<NewTrial> Next(const Pending& pending);

  // `run --from`: trials 0..carried-1 came from another sweep; trial n is the sampler's point
  // n + sample_shift, or for a grid the next point not carried (given by CarriedPoint).
  void SetCarried(int64_t carried, int64_t sample_shift);
  void CarriedPoint(const std::string& params_json);  // grid only
  int64_t carried() const { return carried_; }
  // Resume: numbering goes on after `max_number`; the numbers below it not `started` are drawn
  // again (longest_first starts trials out of order; the sampler gives a number its point).
  void ContinueAfter(int64_t max_number, const std::vector<bool>& started);

  // What TPE learns from (the BOHB rule): a trial's parameters, its value at each rung its
  // reports reach for the first time (with the median rule, at each resource it reports), and
  // a completed trial's final value. Without early stopping, a running trial's report at the
  // highest resource it reached stands in for its final value until it ends: the point of a
  // learning curve before its end is pessimistic (a provisional observation, forgotten if the
  // trial fails), and tells where the trial stands, which the constant liar alone does not.
  void NoteParams(int64_t trial, const nlohmann::json& params);
  void NoteReport(int64_t trial, double resource, double value, const nlohmann::json& params);
  void NoteEnd(int64_t trial, double value, const nlohmann::json& params);
  bool learns() const { return tpe_ != nullptr; }
  // Which way trial `number` was proposed ("tpe", "startup random"), once; "" when not by TPE.
  std::string TakeProposer(int64_t number);

 private:
  TrialSource(const SweepConfig& config) : config_(config) {}
  std::optional<nlohmann::json> SampleFor(int64_t number);
  std::optional<NewTrial> Draw(const Pending& pending);
  nlohmann::json SuggestTpe(int64_t number, std::vector<NewTrial> pending);
  std::optional<double> TpeLevel() const;
  // Without early stopping: observes each pending trial's latest report (provisional_), and
  // forgets those of trials that left without a final value.
  void KeepProvisional(const std::vector<NewTrial>& pending);

  const SweepConfig& config_;
  std::function<double(const nlohmann::json&)> work_;
  std::unique_ptr<search::Sampler> sampler_;
  bool exhausted_ = false;    // the sampler has no more points
  int64_t next_number_ = 0;   // the next number the sampler has not been asked for
  std::deque<int64_t> gaps_;  // numbers below next_number_ that never started (after a resume)
  // order = "longest_first": drawn from the sampler, not started yet; most work first.
  std::map<std::pair<double, int64_t>, nlohmann::json> ahead_;  // (-work, number) -> params
  int64_t carried_ = 0;
  int64_t sample_shift_ = 0;
  std::set<std::string> carried_points_;  // the grid points carried over, as one string each
  std::vector<int64_t> fresh_points_;     // grid indices of trials carried_, carried_ + 1, ...
  int64_t grid_cursor_ = 0;               // the next grid index SampleFor looks at
  // algorithm = "tpe": the sampler, and what it learns from at each level (a resource: the
  // rungs, then the end, +inf), with the parameters of every trial seen; tpe_fed_ is the level
  // it was given. The median rule has no rungs: each resource reported is a level of its own
  // (tpe_exact_levels_), as the rule compares trials at each step, and its memory is the same.
  std::unique_ptr<search::TpeSampler> tpe_;
  bool tpe_exact_levels_ = false;
  std::map<double, std::map<int64_t, double>> tpe_values_;
  std::map<int64_t, nlohmann::json> tpe_params_;
  std::optional<double> tpe_fed_;
  // Without early stopping (tpe_provisional_): each trial's report at the highest resource so
  // far (resource, value) until it ends, and the values TPE holds as provisional observations.
  bool tpe_provisional_ = false;
  std::map<int64_t, std::pair<double, double>> latest_;
  std::map<int64_t, double> provisional_;
  std::map<int64_t, std::string> proposed_by_;
};

}  // namespace sweep
