// The numerics of TPE's kernel mixtures (tpe_mixture.cc): a vectorisable exponential, the normal
// distribution's tails and a kernel's truncated mass, sums of exponentials and products over
// many kernels in a fixed order (so a fixed result), and the counter-based random stream a
// suggestion draws from. Pure functions and a value type; not part of the library's interface.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numbers>

#include "base/hash.h"

namespace sweep::search::internal {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kHalfLog2Pi = 0.91893853320467274178;
// Salt for TPE's streams, so its candidate draws are not random search's values again.
constexpr uint64_t kStreamSalt = 0x7470652d64726177ULL;

// e^x for x <= 0, about 1e-15 relative; branch-free so loops over it vectorise. Below -708 it
// gives e^-708 rather than 0: a term that small never changes a sum of kernels.
inline double ExpNonPositive(double x) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 in two parts: n * kLn2Hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  x = x < -708.0 ? -708.0 : x;
  const double shifted = x * kLog2e + kShifter;
  const double n = shifted - kShifter;
  const double r = (x - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln(2) / 2
  // Taylor series to r^12: the remainder is below 2e-16 on |r| <= 0.347.
  double p = 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^n from n's bits, which sit in the low mantissa bits of `shifted`.
  const int64_t k = std::bit_cast<int64_t>(shifted) - std::bit_cast<int64_t>(kShifter);
  return p * std::bit_cast<double>((k + 1023) << 52);
}

// P(Z > t) for t >= 0 to 4e-9 absolute, for a kernel's truncation mass (>= 0.34, its centre
// lies inside a range >= one bandwidth wide), computed for every kernel at every suggestion:
// cubic Hermite interpolation between knots 1/32 apart, 0 past 8.5 (where P < 1e-17).
class UpperTailTable {
 public:
  UpperTailTable() {
    for (size_t i = 0; i <= kKnots; ++i) {
      const double t = static_cast<double>(i) / kPerUnit;
      value_[i] = 0.5 * std::erfc(t * kInvSqrt2);
      slope_[i] = -std::exp(-0.5 * t * t) / std::sqrt(2 * std::numbers::pi) / kPerUnit;
    }
  }

  double operator()(double t) const {
    if (!(t < kEnd)) return 0;
    const double u = (t > 0 ? t : 0) * kPerUnit;
    const auto i = static_cast<size_t>(u);
    const double s = u - static_cast<double>(i), s2 = s * s, s3 = s2 * s;
    return (2 * s3 - 3 * s2 + 1) * value_[i] + (s3 - 2 * s2 + s) * slope_[i] +
           (3 * s2 - 2 * s3) * value_[i + 1] + (s3 - s2) * slope_[i + 1];
  }

 private:
  static constexpr double kPerUnit = 32;
  static constexpr double kEnd = 8.5;
  static constexpr size_t kKnots = 8 * 32 + 17;  // a knot past kEnd
  double value_[kKnots + 1];
  double slope_[kKnots + 1];
};

inline const UpperTailTable& UpperTailFast() {
  static const UpperTailTable table;
  return table;
}

// P(Z > t), accurate in both tails.
inline double UpperTail(double t) { return 0.5 * std::erfc(t * kInvSqrt2); }

// log P(za <= Z <= zb), za < zb, accurate; far in a tail, where the mass underflows, the
// midpoint rule (monotone there, and those kernels weigh nothing next to the others).
inline double LogMass(double za, double zb) {
  double mass;
  if (za >= 0) {
    mass = UpperTail(za) - UpperTail(zb);
  } else if (zb <= 0) {
    mass = UpperTail(-zb) - UpperTail(-za);
  } else {
    mass = 1 - UpperTail(-za) - UpperTail(zb);
  }
  if (mass > 1e-300) return std::log(mass);
  const double mid = 0.5 * (za + zb);
  return std::log(zb - za) - 0.5 * mid * mid - kHalfLog2Pi;
}

// Two doubles, SSE2's register: the hot loops below keep their sums in these, and so in
// registers on any x86-64 (GCC spreads wider vectors over the stack without AVX).
using Vec2 = double __attribute__((vector_size(16)));

inline Vec2 Load2(const double* p) {
  Vec2 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void Store2(double* p, Vec2 v) { std::memcpy(p, &v, sizeof v); }

inline Vec2 Max2(Vec2 a, Vec2 b) { return a > b ? a : b; }

// The largest of v[0, n), n >= 1; -inf stays -inf.
inline double Largest(const double* v, size_t n) {
  double top = v[0];
  size_t k = 0;
  if (n >= 8) {
    Vec2 m0 = Load2(v), m1 = Load2(v + 2), m2 = Load2(v + 4), m3 = Load2(v + 6);
    for (k = 8; k + 8 <= n; k += 8) {
      m0 = Max2(m0, Load2(v + k));
      m1 = Max2(m1, Load2(v + k + 2));
      m2 = Max2(m2, Load2(v + k + 4));
      m3 = Max2(m3, Load2(v + k + 6));
    }
    const Vec2 m = Max2(Max2(m0, m1), Max2(m2, m3));
    top = m[0] > m[1] ? m[0] : m[1];
  }
  for (; k < n; ++k) top = v[k] > top ? v[k] : top;
  return top;
}

// The sum of e^(v[k] - top) for k < n, top >= every v[k]. Terms below e^-40 are left out:
// next to the largest (1) they are below rounding, and far kernels are most kernels.
inline double ExpTerm(double d) { return d > -40 ? ExpNonPositive(d) : 0.0; }

inline double SumExp(const double* v, size_t n, double top) {
  // Four partial sums: a fixed order (so a fixed result) whose lanes vectorise. A term left
  // out adds an exact 0, so a run of 16 whose largest is left out is skipped whole: with a
  // large history most kernels are far from a candidate, and their exponentials cost the most.
  constexpr size_t kRun = 16;
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t k = 0;
  for (; k + kRun <= n; k += kRun) {
    if (!(Largest(v + k, kRun) - top > -40)) continue;
    for (size_t i = k; i < k + kRun; i += 4) {
      s0 += ExpTerm(v[i] - top);
      s1 += ExpTerm(v[i + 1] - top);
      s2 += ExpTerm(v[i + 2] - top);
      s3 += ExpTerm(v[i + 3] - top);
    }
  }
  for (; k + 4 <= n; k += 4) {
    s0 += ExpTerm(v[k] - top);
    s1 += ExpTerm(v[k + 1] - top);
    s2 += ExpTerm(v[k + 2] - top);
    s3 += ExpTerm(v[k + 3] - top);
  }
  double* rest[3] = {&s0, &s1, &s2};
  for (size_t i = 0; k < n; ++k, ++i) *rest[i] += ExpTerm(v[k] - top);
  return (s0 + s1) + (s2 + s3);
}

// acc[k] += a[j] * mu[j][k] for k < n, over j < dims in order: 16 kernels at a time stay in
// registers across the dimensions. Each sum is formed in the order of the plain loops.
inline void AddProducts(const double* a, const double* const* mu, size_t dims, size_t n,
                        double* acc) {
  constexpr size_t kRun = 16, kVecs = kRun / 2;
  size_t k = 0;
  for (; k + kRun <= n; k += kRun) {
    Vec2 v[kVecs];
    for (size_t i = 0; i < kVecs; ++i) v[i] = Load2(acc + k + 2 * i);
    for (size_t j = 0; j < dims; ++j) {
      const Vec2 aj = Vec2{} + a[j];
      const double* m = mu[j] + k;
      for (size_t i = 0; i < kVecs; ++i) v[i] += aj * Load2(m + 2 * i);
    }
    for (size_t i = 0; i < kVecs; ++i) Store2(acc + k + 2 * i, v[i]);
  }
  for (size_t j = 0; j < dims; ++j) {
    for (size_t i = k; i < n; ++i) acc[i] += a[j] * mu[j][i];
  }
}

// A counter-based stream: the i-th draw depends on (seed, trial, name, i) only.
class Stream {
 public:
  Stream(uint64_t seed, int64_t trial, uint64_t name_hash)
      : state_(
            SplitMix64(SplitMix64(SplitMix64(seed ^ kStreamSalt) ^ static_cast<uint64_t>(trial)) ^
                       name_hash)) {}

  double Unit() {  // [0, 1)
    state_ += 0x9e3779b97f4a7c15ULL;
    return UnitInterval(SplitMix64(state_));
  }

  double Normal() {  // Box-Muller; 1 - Unit() is in (0, 1], so the log is finite
    const double radius = std::sqrt(-2 * std::log(1 - Unit()));
    return radius * std::cos(2 * std::numbers::pi * Unit());
  }

  // Standard normal conditioned on [a, b], a <= 0 <= b, b - a >= 1: rejection accepts at least
  // a third of the draws, so 64 failures (odds 1e-11) fall back to uniform.
  double TruncatedNormal(double a, double b) {
    for (int i = 0; i < 64; ++i) {
      const double z = Normal();
      if (z >= a && z <= b) return z;
    }
    return a + Unit() * (b - a);
  }

 private:
  uint64_t state_;
};

}  // namespace sweep::search::internal
