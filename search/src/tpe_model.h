// The model behind search/tpe.h's TpeSampler, shared by its two source files: the space and
// the history as the model sees them, a suggestion's kernel mixtures and scratch buffers, and
// the class. tpe.cc holds the history, the space's coordinates and Suggest; tpe_mixture.cc one
// group's suggestion (the two mixtures, draws from l, densities) and the constants tuned for it.
// Not part of the library's interface.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/space.h"
#include "search/tpe.h"
#include "tpe_math.h"

namespace sweep::search::internal::tpe {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- the space, as the model sees it ----

// How a parameter is modelled. Internal coordinates: reals as they are (log ones as their log),
// grid values as they are, log integers as log(k), categoricals as the value's index.
struct Dim {
  enum class Type { kContinuous, kDiscrete, kLogInt, kCategorical };
  Type type = Type::kContinuous;
  size_t param = 0;  // declaration index
  bool log = false;  // kContinuous: log_uniform
  // Kernel bounds in internal coordinates; half a step (half a unit) beyond a grid's ends, so
  // the end values get a whole cell of mass.
  double lo = 0, hi = 0;
  double grid_min = 0, step = 0;  // kDiscrete: grid_min + k * step, k < count
  double min = 0, max = 0;        // the distribution's own bounds
  double count = 0;               // kDiscrete: grid points; kCategorical: values
};

// One dimension of a mixture, for K kernels (the prior last).
struct DimModel {
  std::vector<double> mu;         // numeric: centres; categorical: value index, -1 for the prior
  std::vector<double> sigma;      // numeric
  std::vector<double> inv_sigma;  // numeric
  std::vector<double> log_width;  // kDiscrete: log(step / sigma), the midpoint rule's cell
  // Categorical: an observed kernel gives its value weight 1 + eps, every value eps, over a
  // total of 1 + count * eps.
  double eps = 0;
  double log_hit = 0, log_miss = 0, log_prior = 0;
  // Multivariate reals share one bandwidth across the observed kernels, so the square in
  // -z^2 / 2 expands: -(x^2 - 2 x mu + mu^2) w / 2 with w = 1 / sigma^2, whose x^2 term is the
  // same for every kernel and mu^2 term the same for every candidate: one multiply-add per
  // kernel. Coordinates are taken from the range's centre so that the squares stay small.
  bool shared = false;
  double w = 0, centre = 0;
  std::vector<double> mu_centred;  // mu - centre, observed kernels only
};

// A univariate real's kernels sorted by centre, in runs of kSortedRun with bounds that hold for
// every kernel of the run: its centres' span, its widest kernel and its largest base.
struct SortedKernels {
  std::vector<double> mu, inv_sigma, base;
  std::vector<double> run_lo, run_hi, run_inv, run_base;
  void clear() {
    for (auto* v : {&mu, &inv_sigma, &base, &run_lo, &run_hi, &run_inv, &run_base}) v->clear();
  }
};

struct Mixture {
  size_t kernels = 0;  // the set's trials + the prior (last)
  // Kernels [0, shared) take the expanded squares of shared dimensions (observed trials); the
  // rest (running trials, the prior) have bandwidths of their own and are computed apart.
  size_t shared = 0;
  std::vector<double> cum_weight;   // for drawing a kernel
  std::vector<double> base;         // log weight - sum of log sigma and log truncation mass
  std::vector<double> base_shared;  // base - (mu - centre)^2 w / 2 over shared dimensions
  std::vector<DimModel> dims;       // by the group's dims
  SortedKernels sorted;             // empty unless LogDensity may use it
};

struct Group {
  size_t index = 0;          // in groups_
  std::vector<size_t> dims;  // indices into dims_, in declaration order
  uint64_t name_hash = 0;    // of the first member's name: seeds the group's stream
  bool continuous = true;    // every member a real range without a step
};

// The history's per-dimension order for univariate bandwidths: (x, trial) ascending.
struct SortedEntry {
  double x;
  int64_t trial;
  uint32_t row;
  bool operator<(const SortedEntry& o) const { return x < o.x || (x == o.x && trial < o.trial); }
};

// A multivariate group's RowTerms for every active row (by row; NaN for the others), for the
// bandwidths `sigma` (by the group's dims, 0 for a categorical).
struct RowTermTable {
  std::vector<double> sigma;
  std::vector<double> log_mass, quad;
  size_t active = 0;  // rows where the whole group is active
};

// A suggestion's view of the rows: observations first, then the running trials.
struct Rows {
  const double* observed;
  const double* running;
  size_t n_observed;
  size_t width;
  size_t n_running;  // every running trial, active in the group or not
  size_t n_known;    // the first n_known running trials are also observations
  const double* Row(uint32_t row) const {
    return row < n_observed ? observed + row * width : running + (row - n_observed) * width;
  }
};

// What one suggestion works in, kept between suggestions: a history of 10,000 trials makes
// mixtures of megabytes, and fresh ones each time cost as much in page faults as the maths.
// One per thread, so that Suggest stays safe from several threads at once.
struct Scratch {
  Mixture l, g;
  std::vector<uint32_t> good_rows, bad_rows;
  std::vector<std::pair<uint32_t, uint32_t>> ranked;  // good set: (rank, position in the set)
  std::vector<double> candidates, score_l, score_g, weight, mass, quad, top, sum, acc, sigma;
  std::vector<std::pair<double, uint32_t>> sorted, extra;  // univariate bandwidths
  std::vector<uint32_t> position;
};

class TpeSamplerImpl final : public TpeSampler {
 public:
  TpeSamplerImpl(const SearchSpace& space, uint64_t seed, const TpeOptions& options, bool maximize);

  void Observe(int64_t trial, const nlohmann::json& params, double value) override;
  void Unindex(int64_t trial, uint32_t row);
  void Forget(int64_t trial) override;
  void Reset() override;
  size_t size() const override { return trial_.size(); }
  Suggestion Suggest(int64_t trial, const std::vector<nlohmann::json>& running,
                     size_t running_observed, bool provisional) const override;

 private:
  // ---- the space (tpe.cc) ----
  static Dim MakeDim(size_t p, const Distribution& d);
  double Internal(const Dim& dim, const nlohmann::json& v) const;
  // The grid point nearest to x.
  static double Snap(const Dim& dim, double x) {
    const double k = std::clamp(std::round((x - dim.grid_min) / dim.step), 0.0, dim.count - 1);
    return dim.grid_min + k * dim.step;
  }
  nlohmann::json Output(const Dim& dim, double y) const;
  void Parse(const nlohmann::json& params, double* row) const;
  size_t GoodCount(size_t n) const;
  // Whether every dimension of the group has a value in this row.
  bool Active(const Group& group, const double* row) const {
    for (size_t d : group.dims) {
      if (std::isnan(row[d])) return false;
    }
    return true;
  }

  // ---- the mixtures: per-row terms, one group's suggestion (tpe_mixture.cc) ----
  void KeepRowTerms(uint32_t row);
  bool SampleGroup(const Group& group, int64_t trial, const Rows& rows, size_t n_running,
                   const std::vector<uint32_t>& good_rank, const std::vector<uint32_t>& blockers,
                   std::vector<double>& chosen) const;
  static double SetSigma(const Dim& dim, bool good, size_t n, double group_dims);
  double MinSigma(const Dim& dim, size_t k_total) const;
  std::pair<double, double> RowTerms(const Group& group, const double* sigma,
                                     const double* row) const;
  const Mixture& Build(const Group& group, const std::vector<uint32_t>& set, const Rows& rows,
                       const uint32_t* good_rank, Scratch& scratch, Mixture& m,
                       double l_prior_share = 0) const;
  static void Sort(Mixture& m, const std::vector<std::pair<double, uint32_t>>& by_centre);
  void NeighbourSigmas(const Dim& dim, size_t d, const std::vector<uint32_t>& set, const Rows& rows,
                       Scratch& scratch, DimModel& model) const;
  void Draw(const Group& group, const Mixture& m, Stream& stream, double* out) const;
  void DrawKernel(const Group& group, const Mixture& m, size_t k, Stream& stream,
                  double* out) const;
  void LogDensity(const Group& group, const Mixture& m, const std::vector<double>& candidates,
                  Scratch& scratch, std::vector<double>& out) const;
  static void LogDensitySorted(const SortedKernels& s, const std::vector<double>& candidates,
                               Scratch& scratch, std::vector<double>& out);
  static void AddLogKernel(const Dim& dim, const DimModel& model, double x, size_t k0, size_t nb,
                           size_t k_total, double* acc);

  SearchSpace space_;
  uint64_t seed_;
  TpeOptions options_;
  bool maximize_;
  std::unique_ptr<Sampler> random_;  // the startup trials
  std::vector<Dim> dims_;            // the non-constant parameters, in declaration order
  std::vector<Group> groups_;
  std::vector<int> dim_of_param_;    // -1 for a constant
  std::vector<int> group_of_param_;  // -1 for a constant
  std::vector<int> group_of_dim_;    // by dims_ index

  // ---- history ----
  // Rows in arrival order; a replaced observation keeps its row.
  std::vector<int64_t> trial_;
  std::vector<double> score_;  // lower is better: the value, negated to maximise, NaN as +inf
  std::vector<double> x_;      // rows x dims_.size(), internal coordinates, NaN when inactive
  std::vector<std::pair<int64_t, uint32_t>> by_trial_;        // (trial, row), by trial
  std::set<std::tuple<double, int64_t, uint32_t>> by_score_;  // (score, trial, row)
  std::vector<std::vector<SortedEntry>> sorted_;  // univariate only: by dim, active rows by x
  std::vector<RowTermTable> row_terms_;           // multivariate only: by group
};

}  // namespace sweep::search::internal::tpe
