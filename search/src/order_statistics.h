// Online order statistics over multisets that only grow, for the early-stopping schedulers:
// the keep-th largest value with keep = max(1, floor(n / eta)) (an ASHA rung's cutoff) and the
// median (the median rule). Each is two heaps split at the statistic: O(log n) per insert, O(1)
// per query, no deletions needed because a rung or a step never forgets a trial.
// Plain values; not thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <queue>
#include <vector>

namespace sweep::search::internal {

// Values are scores (larger is better) and never NaN: callers map NaN to -infinity first, so
// that the heaps' ordering stays a strict weak order.
class TopFraction {
 public:
  explicit TopFraction(double eta) : eta_(eta) {}

  // Adds `x` and returns the keep-th largest value of everything added so far, x included.
  double Insert(double x) {
    if (top_.empty() || x > top_.top()) {
      top_.push(x);
    } else {
      rest_.push(x);
    }
    const size_t keep = Keep(size());
    while (top_.size() > keep) {
      rest_.push(top_.top());
      top_.pop();
    }
    while (top_.size() < keep && !rest_.empty()) {
      top_.push(rest_.top());
      rest_.pop();
    }
    return top_.top();
  }

  size_t size() const { return top_.size() + rest_.size(); }
  size_t keep() const { return top_.size(); }

  // How many of n values survive: floor(n / eta), but never fewer than one (see the header).
  size_t Keep(size_t n) const {
    const auto k = static_cast<size_t>(std::floor(static_cast<double>(n) / eta_));
    return std::max<size_t>(k, 1);
  }

 private:
  double eta_;
  std::priority_queue<double, std::vector<double>, std::greater<double>> top_;  // the keep best
  std::priority_queue<double> rest_;                                            // the others
};

// The median of a growing multiset; for an even count, the midpoint of the two middle values.
class RunningMedian {
 public:
  void Insert(double x) {
    if (lower_.empty() || x <= lower_.top()) {
      lower_.push(x);
    } else {
      upper_.push(x);
    }
    // lower_ holds the extra element when the count is odd.
    if (lower_.size() > upper_.size() + 1) {
      upper_.push(lower_.top());
      lower_.pop();
    } else if (upper_.size() > lower_.size()) {
      lower_.push(upper_.top());
      upper_.pop();
    }
  }

  size_t size() const { return lower_.size() + upper_.size(); }

  // Only when size() > 0.
  double Median() const {
    if (lower_.size() > upper_.size()) return lower_.top();
    return std::midpoint(lower_.top(), upper_.top());
  }

 private:
  std::priority_queue<double> lower_;                                             // max-heap
  std::priority_queue<double, std::vector<double>, std::greater<double>> upper_;  // min-heap
};

}  // namespace sweep::search::internal
