// One group's suggestion for search/src/tpe.cc's TpeSampler: the good and the bad set's kernel
// mixtures (weights, bandwidths, truncation masses, the per-row terms Observe keeps), draws from
// l, and log l and log g at the draws.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "tpe_math.h"
#include "tpe_model.h"

namespace sweep::search::internal::tpe {
namespace {

// The newest this many trials of the bad set keep full kernel weight; older ones ramp down to
// 1/n.
constexpr size_t kFlatWeights = 25;
// Multivariate bandwidth of the bad set, per unit of range at one kernel: half of Optuna's 0.2.
// A sharper g marks where bad trials are without blurring over the good region between them.
constexpr double kBadBandwidth = 0.1;
// The liar, multivariate: a running trial is a bad observation like any other (in n for gamma
// and for the bad bandwidth), but its kernel weighs this much (an observation's up to 1) and
// is this fraction of an observation's bandwidth wide, no narrower than the magic clip. It
// pushes the next suggestions off the running trial's point and near neighbours without
// driving them out of the region that proposed it. Univariate TPE keeps Optuna's full-weight
// liar, which did better there. Tuned with bench/tpe/tpe_bench.cc --concurrency 8 on seeds
// 100-279 and 1000-3599.
constexpr double kRunningWeight = 0.1;
constexpr double kRunningBandwidth = 0.5;
// A running trial that is also a provisional observation (its latest report, Suggest's
// `provisional`) is placed by that value; its liar kernel weighs this much, and mostly keeps
// suggestions off its point. One valued at a rung keeps kRunningWeight. At kRunningWeight the two
// pushed the next suggestions out of good regions that running trials had found. Tuned with
// bench/tpe/tpe_bench.cc --concurrency 8 --steps 5 on seeds 1000-1299 and 2000-2299, checked on
// 3000-3299.
constexpr double kKnownRunningWeight = 0.01;
// While trials run, multivariate TPE exploits harder in a group of reals, since the running
// trials' results, which one at a time would have refined the model, are not in yet: a good
// trial's rank weight ((n - rank + 1) / n) is raised to the power 1 + kRunningExploit *
// min(running, kRunningExploitCap), and l's prior kernel weighs kRunningPrior of
// prior_weight. With 7 running that is a power of 5.9: the best few good trials draw most
// candidates. A group with a grid or categorical parameter keeps the plain weights: there l
// would mostly draw the best trials' own points again (repeats of finished trials, which the
// duplicate check does not pass over). Tuned with bench/tpe/tpe_bench.cc --concurrency 8 (and
// 2, 4) on seeds 1000-1299.
constexpr double kRunningExploit = 0.7;
constexpr double kRunningExploitCap = 7;
constexpr double kRunningPrior = 0.25;
// Multivariate, from kPriorShareFrom trials (observed and running) on, g's prior keeps at least
// kPriorShare of the share of l that l's prior has. Otherwise, with l capped at gamma_max trials,
// g's prior share falls as 1/n and l/g far from every trial grows as n: from a few hundred
// trials on, draws from l's prior (anywhere) beat the draws near the good trials, and most
// trials are random. At 1 no draw from the prior wins, and a sweep stuck in a local basin
// (styblinski_tang) stays there; 0.3 keeps a few such draws (bench/tpe/tpe_bench.cc
// --windows, 3,000 trials). Below kPriorShareFrom, suggestions are as before, to the bit.
constexpr size_t kPriorShareFrom = 200;
constexpr double kPriorShare = 0.3;
// Below this many kernels a univariate model sorts its centres; above, it walks the index.
constexpr size_t kSortLimit = 128;
constexpr uint32_t kNoPosition = std::numeric_limits<uint32_t>::max();
// From this many kernels a univariate real's mixture is also kept sorted by centre, in runs of
// kSortedRun, so that a candidate skips the runs too far from it to count (see LogDensity).
constexpr size_t kSortedMin = 512;
constexpr size_t kSortedRun = 64;

// n with all but its 7 leading binary digits cleared (exact below 128, so as within 100
// trials): the bad set's bandwidth then moves in steps of at most 1/64 of n (0.3% of the
// bandwidth), and per-row terms made for one serve many suggestions.
size_t BandwidthCount(size_t n) {
  const auto bits = static_cast<int>(std::bit_width(n));
  const int drop = bits > 7 ? bits - 7 : 0;
  return (n >> drop) << drop;
}

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

// Brings each group's RowTermTable up to date after `row` changed: for the bandwidths of the
// bad set a suggestion without running trials would build, so that one reads them instead
// of computing a truncation mass per kernel and dimension. Another suggestion (running
// trials shift the set's size) computes its own; the bits are the same either way.
void TpeSamplerImpl::KeepRowTerms(uint32_t row) {
  if (row_terms_.empty()) return;  // univariate
  const size_t n_rows = trial_.size(), width = dims_.size();
  const size_t n_below = std::min(GoodCount(n_rows), n_rows);
  for (const Group& group : groups_) {
    RowTermTable& table = row_terms_[group.index];
    table.log_mass.resize(n_rows, kNaN);
    table.quad.resize(n_rows, kNaN);
    size_t good = 0;
    auto it = by_score_.begin();
    for (size_t i = 0; i < n_below; ++i, ++it) {
      good += Active(group, &x_[std::get<2>(*it) * width]);
    }
    const size_t n_bad = table.active - good;
    std::vector<double> sigma(group.dims.size(), 0.0);
    for (size_t j = 0; j < group.dims.size(); ++j) {
      const Dim& dim = dims_[group.dims[j]];
      if (dim.type == Dim::Type::kCategorical) continue;
      sigma[j] = std::clamp(SetSigma(dim, false, n_bad, static_cast<double>(group.dims.size())),
                            MinSigma(dim, n_bad + 1), dim.hi - dim.lo);
    }
    auto keep = [&](size_t r) {
      const double* x = &x_[r * width];
      if (Active(group, x)) {
        std::tie(table.log_mass[r], table.quad[r]) = RowTerms(group, table.sigma.data(), x);
      } else {
        table.log_mass[r] = table.quad[r] = kNaN;
      }
    };
    if (sigma == table.sigma) {
      keep(row);
      continue;
    }
    table.sigma = std::move(sigma);
    for (size_t r = 0; r < n_rows; ++r) keep(r);
  }
}

// ---- one group's suggestion ----

// The group's values into `chosen`: of n_ei_candidates draws from l, the one with the largest
// log l - log g that no blocker (a running trial's row) equals on the group's dimensions.
// false when every draw was blocked, and the values taken are a blocker's.
bool TpeSamplerImpl::SampleGroup(const Group& group, int64_t trial, const Rows& rows,
                                 size_t n_running, const std::vector<uint32_t>& good_rank,
                                 const std::vector<uint32_t>& blockers,
                                 std::vector<double>& chosen) const {
  Scratch& scratch = ThreadScratch();
  // The trials where the whole group is active, oldest first (running ones newest).
  std::vector<uint32_t>& good_rows = scratch.good_rows;
  std::vector<uint32_t>& bad_rows = scratch.bad_rows;
  good_rows.clear();
  bad_rows.clear();
  auto active = [&](uint32_t row) { return Active(group, rows.Row(row)); };
  for (const auto& [t, row] : by_trial_) {
    if (active(row)) (good_rank[row] != 0 ? good_rows : bad_rows).push_back(row);
  }
  for (size_t r = 0; r < n_running; ++r) {
    const auto row = static_cast<uint32_t>(rows.n_observed + r);
    if (active(row)) bad_rows.push_back(row);
  }
  const Mixture& l = Build(group, good_rows, rows, good_rank.data(), scratch, scratch.l);
  const double l_prior_share =
      (l.cum_weight.back() - (l.kernels > 1 ? l.cum_weight[l.kernels - 2] : 0.0)) /
      l.cum_weight.back();
  const Mixture& g = Build(group, bad_rows, rows, nullptr, scratch, scratch.g, l_prior_share);

  const size_t width = group.dims.size();
  const auto n = static_cast<size_t>(options_.n_ei_candidates);
  Stream stream(seed_, trial, group.name_hash);
  std::vector<double>& candidates = scratch.candidates;
  candidates.resize(n * width);
  for (size_t c = 0; c < n; ++c) Draw(group, l, stream, &candidates[c * width]);
  std::vector<double>& score_l = scratch.score_l;
  std::vector<double>& score_g = scratch.score_g;
  score_l.resize(n);
  score_g.resize(n);
  LogDensity(group, l, candidates, scratch, score_l);
  LogDensity(group, g, candidates, scratch, score_g);
  auto blocked = [&](const double* x) {
    for (uint32_t row : blockers) {
      const double* r = rows.Row(row);
      size_t j = 0;
      while (j < width && r[group.dims[j]] == x[j]) ++j;
      if (j == width) return true;
    }
    return false;
  };
  size_t best = n, best_any = 0;
  for (size_t c = 0; c < n; ++c) {
    if (score_l[c] - score_g[c] > score_l[best_any] - score_g[best_any]) best_any = c;
    if (!blockers.empty() && blocked(&candidates[c * width])) continue;
    if (best == n || score_l[c] - score_g[c] > score_l[best] - score_g[best]) best = c;
  }
  if (best == n) {
    // Every draw repeats a running trial (a small grid, l narrow around it): as many again
    // from l's prior, the whole domain; if those repeat too, the best draw after all.
    std::vector<double> more(n * width);
    for (size_t c = 0; c < n; ++c) DrawKernel(group, l, l.kernels - 1, stream, &more[c * width]);
    LogDensity(group, l, more, scratch, score_l);
    LogDensity(group, g, more, scratch, score_g);
    size_t pick = n;
    for (size_t c = 0; c < n; ++c) {
      if (blocked(&more[c * width])) continue;
      if (pick == n || score_l[c] - score_g[c] > score_l[pick] - score_g[pick]) pick = c;
    }
    const double* from = pick == n ? &candidates[best_any * width] : &more[pick * width];
    for (size_t j = 0; j < width; ++j) chosen[group.dims[j]] = from[j];
    return pick != n;
  }
  for (size_t j = 0; j < width; ++j) chosen[group.dims[j]] = candidates[best * width + j];
  return true;
}

// A multivariate set's bandwidth in `dim` before the clip, shared by its observed kernels; n
// counts the set's trials, running ones included. The good set: range / min(100, n + 2), the
// magic clip's floor, so draws from l refine around the good trials and more finely as the
// set grows. The bad set: a Scott-like rule, narrower with more trials, wider with more
// dimensions, with n rounded (BandwidthCount) so that it changes seldom.
double TpeSamplerImpl::SetSigma(const Dim& dim, bool good, size_t n, double group_dims) {
  const double range = dim.hi - dim.lo;
  if (good) return range / std::min(100.0, static_cast<double>(n) + 2);
  return kBadBandwidth *
         std::pow(std::max<double>(static_cast<double>(BandwidthCount(n)), 1.0),
                  -1.0 / (group_dims + 4)) *
         range;
}

// The magic clip: no kernel of k kernels narrower than range / min(100, k + 1).
double TpeSamplerImpl::MinSigma(const Dim& dim, size_t k_total) const {
  const double range = dim.hi - dim.lo;
  return options_.magic_clip ? range / std::min(100.0, 1.0 + static_cast<double>(k_total))
                             : range * 1e-12;
}

// An observed kernel's log truncation mass (the product over the group's numeric dimensions)
// and its share of the expanded squares (the sum over its reals), with bandwidths `sigma` by
// the group's dims. Build's own loops would give the same bits.
std::pair<double, double> TpeSamplerImpl::RowTerms(const Group& group, const double* sigma,
                                                   const double* row) const {
  const UpperTailTable& tail = UpperTailFast();
  double mass = 1.0, quad = 0.0;
  for (size_t j = 0; j < group.dims.size(); ++j) {
    const Dim& dim = dims_[group.dims[j]];
    if (dim.type == Dim::Type::kCategorical) continue;
    const double mu = row[group.dims[j]];
    const double inv = 1.0 / sigma[j];
    mass *= 1 - tail((mu - dim.lo) * inv) - tail((dim.hi - mu) * inv);
    if (dim.type == Dim::Type::kDiscrete) continue;
    const double centred = mu - 0.5 * (dim.lo + dim.hi);
    const double w = inv * inv;
    quad += 0.5 * centred * centred * w;
  }
  return {std::log(mass), quad};
}

// The mixture of one set, in `m` (its buffers reused): a kernel per row (in the given order)
// and the prior last. `good_rank` (by observed row) is given for the good set, null for the
// bad one; `l_prior_share`, for the bad one, is l's prior's share of l's weight.
const Mixture& TpeSamplerImpl::Build(const Group& group, const std::vector<uint32_t>& set,
                                     const Rows& rows, const uint32_t* good_rank, Scratch& scratch,
                                     Mixture& m, double l_prior_share) const {
  const size_t n = set.size();
  const size_t k_total = n + 1;
  const bool good = good_rank != nullptr;
  // While trials run, l exploits harder (kRunningExploit), multivariate, in a group of reals:
  // on a grid it would mostly draw the best trials' own points again.
  const bool exploit = good && options_.multivariate && rows.n_running > 0 && group.continuous;
  m.kernels = k_total;
  // Running trials come last in a set (and only in the bad one): kernels [n_observed, n).
  size_t n_observed = n;
  while (n_observed > 0 && set[n_observed - 1] >= rows.n_observed) --n_observed;

  // Weights, the prior's apart. The good set: by rank, from 1 for the best down to 1/n for the
  // worst in steps of 1/n, so draws favour the best trials while the others still count. The
  // bad set: the newest kFlatWeights at 1 (running trials the newest; multivariate, at
  // kRunningWeight, or kKnownRunningWeight where also observed), older ones on a ramp from
  // 1/n.
  std::vector<double>& weight = scratch.weight;
  weight.assign(k_total, 1.0);
  if (good) {
    std::vector<std::pair<uint32_t, uint32_t>>& ranked = scratch.ranked;
    ranked.clear();
    for (size_t i = 0; i < n; ++i) {
      ranked.push_back({good_rank[set[i]], static_cast<uint32_t>(i)});
    }
    std::sort(ranked.begin(), ranked.end());
    for (size_t r = 0; r < n; ++r) {
      weight[ranked[r].second] = static_cast<double>(n - r) / static_cast<double>(n);
    }
    if (exploit) {
      const double power =
          1 + kRunningExploit * std::min(static_cast<double>(rows.n_running), kRunningExploitCap);
      for (size_t i = 0; i < n; ++i) weight[i] = std::pow(weight[i], power);
    }
  } else if (n > kFlatWeights) {
    const size_t ramp = n - kFlatWeights;
    const double first = 1.0 / static_cast<double>(n);
    for (size_t i = 0; i < ramp; ++i) {
      weight[i] =
          ramp == 1 ? first
                    : first + static_cast<double>(i) * (1 - first) / static_cast<double>(ramp - 1);
    }
  }
  if (options_.multivariate) {
    for (size_t i = n_observed; i < n; ++i) {
      weight[i] = set[i] - rows.n_observed < rows.n_known ? kKnownRunningWeight : kRunningWeight;
    }
  }
  weight[n] = options_.prior_weight;
  if (exploit) weight[n] *= kRunningPrior;
  if (!good && options_.multivariate && rows.n_observed + rows.n_running >= kPriorShareFrom &&
      l_prior_share < 1) {
    double observed = 0;
    for (size_t k = 0; k < n; ++k) observed += weight[k];
    const double share = kPriorShare * l_prior_share;
    weight[n] = std::max(weight[n], share / (1 - share) * observed);
  }
  double total = 0;
  for (double w : weight) total += w;
  m.cum_weight.resize(k_total);
  m.base.resize(k_total);
  double running_sum = 0;
  for (size_t k = 0; k < k_total; ++k) {
    running_sum += weight[k];
    m.cum_weight[k] = running_sum;
    m.base[k] = std::log(weight[k] / total);
  }

  // Kernels from first_own on have bandwidths of their own: all univariate; multivariate,
  // the running trials and the prior.
  const size_t first_own = options_.multivariate ? n_observed : 0;
  std::vector<double>& mass = scratch.mass;  // product of truncation masses over numeric dims
  std::vector<double>& quad = scratch.quad;  // sum of (mu - centre)^2 w / 2 over shared dims
  mass.assign(k_total, 1.0);
  quad.assign(k_total, 0.0);
  const double group_dims = static_cast<double>(group.dims.size());
  m.dims.resize(group.dims.size());
  for (DimModel& model : m.dims) model.mu.resize(k_total);
  // One pass over the rows for all the group's dimensions: rows are contiguous, columns not.
  for (size_t i = 0; i < n; ++i) {
    const double* row = rows.Row(set[i]);
    for (size_t j = 0; j < group.dims.size(); ++j) m.dims[j].mu[i] = row[group.dims[j]];
  }
  for (size_t j = 0; j < group.dims.size(); ++j) {
    const size_t d = group.dims[j];
    const Dim& dim = dims_[d];
    DimModel& model = m.dims[j];
    model.shared = false;

    if (dim.type == Dim::Type::kCategorical) {
      model.mu[n] = -1;
      model.eps = options_.prior_weight / static_cast<double>(k_total);
      const double norm = std::log(1 + dim.count * model.eps);
      model.log_hit = std::log(1 + model.eps) - norm;
      model.log_miss = std::log(model.eps) - norm;
      model.log_prior = -std::log(dim.count);
      continue;
    }

    const double range = dim.hi - dim.lo;
    model.mu[n] = 0.5 * (dim.lo + dim.hi);
    model.sigma.resize(k_total);
    if (options_.multivariate) {
      std::fill(model.sigma.begin(), model.sigma.end(), SetSigma(dim, good, n, group_dims));
    } else {
      NeighbourSigmas(dim, d, set, rows, scratch, model);
    }
    if (options_.multivariate) {
      for (size_t k = n_observed; k < n; ++k) model.sigma[k] *= kRunningBandwidth;
    }
    const double min_sigma = MinSigma(dim, k_total);
    for (double& s : model.sigma) s = std::clamp(s, min_sigma, range);
    model.sigma[n] = range;  // the prior covers the whole domain

    model.inv_sigma.resize(k_total);
    const bool discrete = dim.type == Dim::Type::kDiscrete;
    if (discrete) model.log_width.resize(k_total);
    const double* mu = model.mu.data();
    const double* sigma = model.sigma.data();
    double* inv_sigma = model.inv_sigma.data();
    for (size_t k = 0; k < k_total; ++k) inv_sigma[k] = 1.0 / sigma[k];
    // Observed kernels take their truncation masses from per-row terms (below).
    const UpperTailTable& tail = UpperTailFast();
    for (size_t k = first_own; k < k_total; ++k) {
      mass[k] *= 1 - tail((mu[k] - dim.lo) * inv_sigma[k]) - tail((dim.hi - mu[k]) * inv_sigma[k]);
    }
    // Multivariate bandwidths repeat: one log per distinct run of them.
    double last_sigma = kNaN, last_log = 0;
    for (size_t k = 0; k < k_total; ++k) {
      if (sigma[k] != last_sigma) {
        last_sigma = sigma[k];
        last_log = std::log(sigma[k]);
      }
      if (discrete) {
        model.log_width[k] = std::log(dim.step) - last_log;
      } else {
        m.base[k] -= last_log;
      }
    }
    // The observed kernels share one bandwidth; running ones and the prior stay apart.
    if (options_.multivariate && !discrete && n_observed > 0) {
      model.shared = true;
      model.w = inv_sigma[0] * inv_sigma[0];
      model.centre = model.mu[n];
      model.mu_centred.resize(n_observed);
      for (size_t k = 0; k < n_observed; ++k) model.mu_centred[k] = mu[k] - model.centre;
    }
  }
  if (first_own > 0) {
    // Multivariate: the observed kernels share each dimension's bandwidth, so their masses
    // and squares are per-row terms, kept by Observe for the bad set's likely bandwidths.
    std::vector<double>& sigma = scratch.sigma;
    sigma.assign(group.dims.size(), 0.0);
    for (size_t j = 0; j < group.dims.size(); ++j) {
      if (dims_[group.dims[j]].type != Dim::Type::kCategorical) sigma[j] = m.dims[j].sigma[0];
    }
    const RowTermTable& kept = row_terms_[group.index];
    if (sigma == kept.sigma) {
      for (size_t k = 0; k < n_observed; ++k) {
        mass[k] = kept.log_mass[set[k]];
        quad[k] = kept.quad[set[k]];
      }
    } else {
      for (size_t k = 0; k < n_observed; ++k) {
        std::tie(mass[k], quad[k]) = RowTerms(group, sigma.data(), rows.Row(set[k]));
      }
    }
  }
  for (size_t k = 0; k < first_own; ++k) m.base[k] -= mass[k];  // a log already
  for (size_t k = first_own; k < k_total; ++k) m.base[k] -= std::log(mass[k]);
  m.shared = n_observed;
  m.base_shared.resize(k_total);
  for (size_t k = 0; k < k_total; ++k) m.base_shared[k] = m.base[k] - quad[k];
  m.sorted.clear();
  if (!options_.multivariate && group.dims.size() == 1 && k_total >= kSortedMin) {
    const Dim::Type type = dims_[group.dims[0]].type;
    // NeighbourSigmas left this dimension's kernels in scratch.sorted, by centre.
    if (type == Dim::Type::kContinuous || type == Dim::Type::kLogInt) Sort(m, scratch.sorted);
  }
  return m;
}

// Fills m.sorted from the kernels' (centre, position) pairs in centre order.
void TpeSamplerImpl::Sort(Mixture& m, const std::vector<std::pair<double, uint32_t>>& by_centre) {
  SortedKernels& s = m.sorted;
  const DimModel& model = m.dims[0];
  const size_t n = by_centre.size();
  s.mu.resize(n);
  s.inv_sigma.resize(n);
  s.base.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = by_centre[i].second;
    s.mu[i] = by_centre[i].first;
    s.inv_sigma[i] = model.inv_sigma[k];
    s.base[i] = m.base[k];
  }
  for (size_t lo = 0; lo < s.mu.size(); lo += kSortedRun) {
    const size_t hi = std::min(lo + kSortedRun, s.mu.size());
    s.run_lo.push_back(s.mu[lo]);
    s.run_hi.push_back(s.mu[hi - 1]);
    s.run_inv.push_back(*std::min_element(s.inv_sigma.begin() + lo, s.inv_sigma.begin() + hi));
    s.run_base.push_back(*std::max_element(s.base.begin() + lo, s.base.begin() + hi));
  }
}

// Univariate bandwidths: each kernel reaches to the farther of its neighbours (centres
// sorted, the prior's among them, the domain's ends beyond).
void TpeSamplerImpl::NeighbourSigmas(const Dim& dim, size_t d, const std::vector<uint32_t>& set,
                                     const Rows& rows, Scratch& scratch, DimModel& model) const {
  const size_t n = set.size();
  std::vector<std::pair<double, uint32_t>>& sorted = scratch.sorted;  // (centre, kernel position)
  sorted.clear();
  if (n < kSortLimit) {
    for (size_t i = 0; i <= n; ++i) sorted.push_back({model.mu[i], static_cast<uint32_t>(i)});
    std::sort(sorted.begin(), sorted.end());
  } else {
    // The history keeps each dimension sorted: walk it, keeping this set's rows, and merge
    // in the running trials and the prior (sorted here: few).
    std::vector<uint32_t>& position = scratch.position;
    std::vector<std::pair<double, uint32_t>>& extra = scratch.extra;
    position.assign(rows.n_observed, kNoPosition);
    extra.clear();
    for (size_t i = 0; i < n; ++i) {
      if (set[i] < rows.n_observed) {
        position[set[i]] = static_cast<uint32_t>(i);
      } else {
        extra.push_back({model.mu[i], static_cast<uint32_t>(i)});
      }
    }
    extra.push_back({model.mu[n], static_cast<uint32_t>(n)});
    std::sort(extra.begin(), extra.end());
    size_t e = 0;
    for (const SortedEntry& entry : sorted_[d]) {
      const uint32_t pos = position[entry.row];
      if (pos == kNoPosition) continue;
      while (e < extra.size() && extra[e].first < entry.x) sorted.push_back(extra[e++]);
      sorted.push_back({entry.x, pos});
    }
    while (e < extra.size()) sorted.push_back(extra[e++]);
  }
  const size_t count = sorted.size();
  for (size_t i = 0; i < count; ++i) {
    const double x = sorted[i].first;
    const double left = x - (i == 0 ? dim.lo : sorted[i - 1].first);
    const double right = (i + 1 == count ? dim.hi : sorted[i + 1].first) - x;
    double s = std::max(left, right);
    // Without endpoints the outermost kernels look inward only.
    if (!options_.consider_endpoints && count >= 2) {
      if (i == 0) s = right;
      if (i + 1 == count) s = left;
    }
    model.sigma[sorted[i].second] = s;
  }
}

// One draw from mixture m into out[0 .. group.dims.size()).
void TpeSamplerImpl::Draw(const Group& group, const Mixture& m, Stream& stream, double* out) const {
  const double u = stream.Unit() * m.cum_weight.back();
  const auto k = static_cast<size_t>(std::min<std::ptrdiff_t>(
      std::upper_bound(m.cum_weight.begin(), m.cum_weight.end(), u) - m.cum_weight.begin(),
      static_cast<std::ptrdiff_t>(m.kernels - 1)));
  DrawKernel(group, m, k, stream, out);
}

// One draw from kernel k of mixture m.
void TpeSamplerImpl::DrawKernel(const Group& group, const Mixture& m, size_t k, Stream& stream,
                                double* out) const {
  for (size_t j = 0; j < group.dims.size(); ++j) {
    const Dim& dim = dims_[group.dims[j]];
    const DimModel& model = m.dims[j];
    if (dim.type == Dim::Type::kCategorical) {
      const double v = stream.Unit();
      const double mu = model.mu[k];
      if (mu < 0) {  // the prior: uniform
        out[j] = std::min(std::floor(v * dim.count), dim.count - 1);
        continue;
      }
      // Keep the observed value with weight 1, else any value with weight eps each.
      const double scaled = v * (1 + dim.count * model.eps);
      out[j] = scaled < 1 ? mu : std::min(std::floor((scaled - 1) / model.eps), dim.count - 1);
      continue;
    }
    const double mu = model.mu[k], sigma = model.sigma[k];
    const double z = stream.TruncatedNormal((dim.lo - mu) / sigma, (dim.hi - mu) / sigma);
    const double y = std::clamp(mu + sigma * z, dim.lo, dim.hi);
    switch (dim.type) {
      case Dim::Type::kContinuous:
        out[j] = y;
        break;
      case Dim::Type::kDiscrete:
        out[j] = Snap(dim, y);
        break;
      case Dim::Type::kLogInt:
        out[j] = std::log(std::clamp(std::round(std::exp(y)), dim.min, dim.max));
        break;
      case Dim::Type::kCategorical:
        break;
    }
  }
}

// log m(x) for every candidate. Constants common to all kernels of a dimension (the normal's
// 1/sqrt(2 pi)) are left out: they cancel in log l - log g. Kernels go in blocks that stay in
// cache while every candidate visits them; each candidate keeps a running log-sum-exp.
void TpeSamplerImpl::LogDensity(const Group& group, const Mixture& m,
                                const std::vector<double>& candidates, Scratch& scratch,
                                std::vector<double>& out) const {
  if (!m.sorted.mu.empty()) {
    LogDensitySorted(m.sorted, candidates, scratch, out);
    return;
  }
  constexpr size_t kBlock = 256;
  const size_t width = group.dims.size();
  const size_t k_total = m.kernels;
  const size_t n = out.size();
  std::vector<double>& top = scratch.top;  // per candidate: max so far, sum below it
  std::vector<double>& sum = scratch.sum;
  std::vector<double>& acc = scratch.acc;
  top.assign(n, -kInf);
  sum.assign(n, 0.0);
  acc.resize(kBlock);
  std::vector<double> a(width);  // a run of shared dimensions: the candidate's factors
  std::vector<const double*> mu_run(width);
  for (size_t k0 = 0; k0 < k_total; k0 += kBlock) {
    const size_t nb = std::min(kBlock, k_total - k0);
    // This block's kernels on the expanded squares come first: [0, n_shared). The rest
    // (running trials, then the prior) have bandwidths of their own.
    const size_t n_shared = m.shared > k0 ? std::min(nb, m.shared - k0) : 0;
    for (size_t c = 0; c < n; ++c) {
      const double* x = &candidates[c * width];
      double x_square = 0;  // the candidate's share of the expanded squares
      for (size_t j = 0; j < width; ++j) {
        const DimModel& model = m.dims[j];
        if (model.shared) x_square += 0.5 * (x[j] - model.centre) * (x[j] - model.centre) * model.w;
      }
      for (size_t k = 0; k < n_shared; ++k) acc[k] = m.base_shared[k0 + k] - x_square;
      for (size_t k = n_shared; k < nb; ++k) acc[k] = m.base[k0 + k];
      // Dimensions in order; a run of shared ones goes through the kernels once.
      for (size_t j = 0; j < width;) {
        if (!m.dims[j].shared) {
          AddLogKernel(dims_[group.dims[j]], m.dims[j], x[j], k0, nb, k_total, acc.data());
          ++j;
          continue;
        }
        size_t run = 0;
        for (; j + run < width && m.dims[j + run].shared; ++run) {
          const DimModel& model = m.dims[j + run];
          a[run] = (x[j + run] - model.centre) * model.w;
          mu_run[run] = model.mu_centred.data() + k0;
        }
        AddProducts(a.data(), mu_run.data(), run, n_shared, acc.data());
        for (; run > 0; --run, ++j) {
          const DimModel& model = m.dims[j];
          for (size_t k = n_shared; k < nb; ++k) {
            const double z = (x[j] - model.mu[k0 + k]) * model.inv_sigma[k0 + k];
            acc[k] -= 0.5 * z * z;
          }
        }
      }
      const double block_top = Largest(acc.data(), nb);
      if (block_top == -kInf) continue;
      if (block_top > top[c]) {
        sum[c] *= ExpNonPositive(top[c] - block_top);
        top[c] = block_top;
      }
      sum[c] += SumExp(acc.data(), nb, top[c]);
    }
  }
  for (size_t c = 0; c < n; ++c) out[c] = top[c] + std::log(sum[c]);
}

// LogDensity for a univariate real's kernels sorted by centre. A run whose bound lies below
// e^-40 of the largest term so far is skipped: the rule SumExp applies to single terms, so
// the result differs from the plain loop's by rounding only. The run around the candidate
// goes first, so that the largest term is known early; then the rest in order.
void TpeSamplerImpl::LogDensitySorted(const SortedKernels& s, const std::vector<double>& candidates,
                                      Scratch& scratch, std::vector<double>& out) {
  const size_t k_total = s.mu.size(), runs = s.run_lo.size();
  std::vector<double>& acc = scratch.acc;
  acc.resize(kSortedRun);
  for (size_t c = 0; c < out.size(); ++c) {
    const double x = candidates[c];
    double top = -kInf, sum = 0;
    auto visit = [&](size_t r) {
      if (top != -kInf) {
        const double gap = x < s.run_lo[r] ? s.run_lo[r] - x : std::max(0.0, x - s.run_hi[r]);
        const double z = gap * s.run_inv[r];
        if (s.run_base[r] - 0.5 * z * z - top < -40) return;
      }
      const size_t k0 = r * kSortedRun, nb = std::min(kSortedRun, k_total - k0);
      for (size_t k = 0; k < nb; ++k) {
        const double z = (x - s.mu[k0 + k]) * s.inv_sigma[k0 + k];
        acc[k] = s.base[k0 + k] - 0.5 * z * z;
      }
      const double run_top = Largest(acc.data(), nb);
      if (run_top == -kInf) return;
      if (run_top > top) {
        sum *= ExpNonPositive(top - run_top);
        top = run_top;
      }
      sum += SumExp(acc.data(), nb, top);
    };
    const size_t at =
        static_cast<size_t>(std::lower_bound(s.mu.begin(), s.mu.end(), x) - s.mu.begin());
    const size_t first = std::min(at / kSortedRun, runs - 1);
    visit(first);
    for (size_t r = 0; r < runs; ++r) {
      if (r != first) visit(r);
    }
    out[c] = top + std::log(sum);
  }
}

// Adds log k(x) of dimension `dim` to acc[0, nb) for kernels k0 .. k0 + nb.
void TpeSamplerImpl::AddLogKernel(const Dim& dim, const DimModel& model, double x, size_t k0,
                                  size_t nb, size_t k_total, double* acc) {
  const double* mu = model.mu.data() + k0;
  switch (dim.type) {
    case Dim::Type::kContinuous:
    case Dim::Type::kLogInt: {
      const double* inv = model.inv_sigma.data() + k0;
      for (size_t k = 0; k < nb; ++k) {
        const double z = (x - mu[k]) * inv[k];
        acc[k] -= 0.5 * z * z;
      }
      return;
    }
    case Dim::Type::kDiscrete: {
      // The cell [x - step/2, x + step/2]: exact, or by the midpoint rule when the cell is
      // narrow next to the bandwidth (relative error below (step/sigma)^2 / 24).
      const double half = 0.5 * dim.step;
      const double* inv = model.inv_sigma.data() + k0;
      const double* log_width = model.log_width.data() + k0;
      for (size_t k = 0; k < nb; ++k) {
        if (dim.step * inv[k] < 0.25) {
          const double z = (x - mu[k]) * inv[k];
          acc[k] += log_width[k] - 0.5 * z * z - kHalfLog2Pi;
        } else {
          acc[k] += LogMass((x - half - mu[k]) * inv[k], (x + half - mu[k]) * inv[k]);
        }
      }
      return;
    }
    case Dim::Type::kCategorical:
      for (size_t k = 0; k < nb; ++k) {
        // The prior (the last kernel) gives every value the same probability.
        acc[k] +=
            k0 + k + 1 == k_total ? model.log_prior : (mu[k] == x ? model.log_hit : model.log_miss);
      }
      return;
  }
}

}  // namespace sweep::search::internal::tpe
