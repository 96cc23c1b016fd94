// Model-based search: the tree-structured Parzen estimator (Bergstra et al. 2011; Watanabe 2023).
// A TpeSampler keeps the finished trials handed to it and proposes the next trial's parameters
// where good trials are dense and the rest are not. Its suggestions are a pure function of
// (space, seed, options, trial number, the observations, the running list): no clock, no I/O,
// no threads. With no running trials, running-trial rules (startup count, the liar, the
// duplicate check) do nothing.
// MakeTpeSampler's caller owns the sampler; Suggest is const and safe from several threads at
// once, Observe and Reset are not (one writer, as for a Scheduler).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "search/space.h"

namespace sweep::search {

// The [search] keys of algorithm = "tpe". Defaults are Optuna's TPESampler's, but for gamma
// (0.2, Optuna's is 0.1) and multivariate (true): with the good set's bandwidths and weights
// below, these find better values within 100 trials (bench/tpe/tpe_bench.cc).
struct TpeOptions {
  // Trials proposed by random search (exactly MakeRandomSampler(space, seed)'s) while the
  // observations and the running trials number fewer than this (>= 0).
  int64_t n_startup_trials = 10;
  // Draws from the good-trial model scored per suggestion (>= 1).
  int64_t n_ei_candidates = 24;
  // The good set is the best min(ceil(gamma * n), gamma_max) of n trials (running ones
  // included in n); 0 < gamma <= 1, gamma_max >= 1.
  double gamma = 0.2;
  int64_t gamma_max = 25;
  // Weight of the prior kernel (the whole domain) in each model (> 0).
  double prior_weight = 1.0;
  // true: one kernel per observation across the parameters that occur together (see below);
  // false: every parameter modelled and chosen on its own.
  bool multivariate = true;
  // Univariate bandwidths: whether the outermost kernels also reach to the domain's ends.
  bool consider_endpoints = false;
  // Bandwidths at least range / min(100, kernels + 1): a few close points do not collapse the
  // model onto themselves.
  bool magic_clip = true;
};

// Checks every key; the message names it, e.g. "search.n_ei_candidates: must be >= 1 (got 0)".
Status Validate(const TpeOptions& options);

struct Suggestion {
  enum class Source { kStartupRandom, kTpe };
  // The trial's parameters as a JSON object (keys sorted, inactive conditionals absent),
  // the same shape as Sampler::Sample gives.
  nlohmann::json params;
  Source source = Source::kStartupRandom;
};

// "startup random" or "tpe": for logs and the store.
std::string_view SourceName(Suggestion::Source source);

// How a suggestion is made, once observations and running trials number n_startup_trials (so
// with N trials at once, as with one, the first n_startup_trials trials are random search's):
//  1. Observations are ranked by value in the sweep's mode (NaN last, ties by trial number).
//     Running trials rank after all of them (the constant liar: pessimistic observations, the
//     worst value seen). The best n_below = min(gamma(n), n_obs) observations are the good set,
//     the rest and the running ones the bad set; n counts the observations and the running
//     trials, a running trial with a provisional value once (with a rung's value, twice).
//  2. Parameters are modelled in groups, in declaration order: multivariate, one group holds
//     the unconditional parameters and one more each set of parameters sharing a condition;
//     univariate, each parameter is a group. A group sees only the trials where it is active.
//  3. Each set gives a mixture l (good) or g (bad): one kernel per trial plus a prior kernel
//     over the whole domain. Of l's n_l trials the best weighs 1, the next 1 - 1/n_l, down to
//     1/n_l for the worst; in g weights fall for trials older than the newest 25 (running
//     trials the newest); multivariate, from 200 trials (observed and running) on, g's prior
//     has at least 0.3 times the share of g that l's prior has of l (else l / g far from
//     every trial grows as n, and uniform draws from l's prior win most asks). Bandwidths,
//     multivariate: in l range / min(100, n_l + 2) per parameter, in g 0.1 * n_g^(-1 / (d + 4)) *
//     range (half Optuna's Scott-like rule; n_g counts the running trials, and from 128 on keeps
//     its 7 leading binary digits, so that per-row terms made for it serve many asks); univariate:
//     the distance to the farther neighbour (Optuna's; running trials are neighbours too). Reals
//     are truncated normals (log-uniform in log space); integer and stepped ranges are the same
//     normal rounded to their grid; categoricals keep their observed value with weight 1 +
//     prior_weight / kernels, every value with prior_weight / kernels. Then all bandwidths are
//     clipped to [range / min(100, kernels + 1), range] (magic_clip; else [1e-12 range, range]).
//     The liar's kernel, multivariate: a running trial's kernel in g weighs 0.1 (0.01 for one
//     with a provisional value, which that value places) and is half a bad observation's
//     bandwidth (before the clip), so it pushes suggestions off its point and near neighbours
//     without driving them out of the region that proposed it. Univariate: an
//     observation's (weight 1 or the ramp's, its neighbour bandwidth), Optuna's liar.
//     While R trials run, multivariate, in a group of reals only (no step, no categorical), l
//     exploits harder: each good weight above is raised to the power 1 + 0.7 min(R, 7) (5.9
//     with 7 running) and l's prior weighs prior_weight / 4. The running trials' results, which
//     one at a time would have refined l, are not in yet; drawing closer to the best trials
//     makes up for part of that.
//  4. n_ei_candidates points are drawn from l; the one with the largest log l - log g wins,
//     except one that would repeat a running trial. Groups are sampled in declaration order; a
//     running trial matches while it equals the point on every group sampled or left out so
//     far (inactive where the point is). In group G, a candidate equal on G's parameters to a
//     matching running trial whose last active group is G is passed over. If all are, as many
//     more are drawn from l's prior kernel (the whole domain) and scored the same way; if those
//     are all passed over too, the best of the first draws is taken, and once the point is
//     complete it is made again with every matching running trial active in group G (not only
//     those ending there) passing over its equals in G, so that the point leaves the running
//     trials at the first group it can. A repeat is left only where no draw found another
//     value (the running trials fill nearly all of a group's values).
// Randomness is a counter-based stream hashed from (seed, trial, the group's first name).
//
// Observations carry their params as a sampler gave them. A value outside its range is
// clamped, off its grid rounded, a categorical not among the values or a missing parameter
// makes that parameter inactive for this observation. What to feed is the caller's choice:
// completed trials' final values; with early stopping, the values at the highest rung that
// has at least n_startup_trials of them (the BOHB rule), re-fed through Reset when that rung
// changes. Pruned or failed trials are best left out rather than given a made-up value.
// Without early stopping, a running trial's latest report may stand in for its final value
// (observed again when it ends, forgotten if it fails): a learning curve's value before its end
// is pessimistic, and it tells where the running trial stands, which the liar alone cannot.
class TpeSampler {
 public:
  virtual ~TpeSampler() = default;

  // Adds one observation: O(log n), plus O(n) memory moves for univariate models. A trial
  // observed again replaces its earlier observation. The order of calls does not matter:
  // the model depends on the set of observations.
  virtual void Observe(int64_t trial, const nlohmann::json& params, double value) = 0;
  // Forgets trial's observation, if it has one: the model is then as if it had never been
  // observed (a provisional value whose trial failed). O(n) memory moves at most.
  virtual void Forget(int64_t trial) = 0;
  // Forgets every observation (to refeed another set, e.g. a higher rung's).
  virtual void Reset() = 0;
  // Number of observations held.
  virtual size_t size() const = 0;

  // Trial `trial`'s parameters (trial >= 0), given the params of the trials still running.
  // `running_observed` of those are also observations (a running trial with a value at the rung
  // the caller feeds): they count once towards n_startup_trials. In the model a running trial is
  // a pessimistic observation whether or not it is also a real one, so that suggestions keep off
  // its point. With `provisional`, the observed ones are the first `running_observed` and their
  // values are their latest reports (no early stopping): they count once in gamma's n too, and
  // their liar kernels weigh 0.01. O(n * d * n_ei_candidates) for n observations of d
  // parameters.
  virtual Suggestion Suggest(int64_t trial, const std::vector<nlohmann::json>& running,
                             size_t running_observed = 0, bool provisional = false) const = 0;
};

// Validates `options`; the sampler keeps its own copy of `space`.
Result<std::unique_ptr<TpeSampler>> MakeTpeSampler(const SearchSpace& space, uint64_t seed,
                                                   const TpeOptions& options, bool maximize);

}  // namespace sweep::search
