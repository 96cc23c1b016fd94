// MlpShape layout and the seeded initialisation. Owned by the trainer. Pure functions.
#include "model.h"

#include <algorithm>
#include <cmath>

#include "rng.h"

namespace sweep::trainer {
namespace {

constexpr int64_t kAlignFloats = 16;         // 64 bytes
constexpr uint64_t kInitStream = 0x1A17ull;  // keeps init draws apart from shuffle draws

int64_t AlignUp(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

}  // namespace

bool ParseActivation(const std::string& name, Activation* act) {
  if (name == "relu") {
    *act = Activation::kRelu;
  } else if (name == "tanh") {
    *act = Activation::kTanh;
  } else if (name == "gelu") {
    *act = Activation::kGelu;
  } else {
    return false;
  }
  return true;
}

bool ParseInit(const std::string& name, InitScheme* init) {
  if (name == "auto") {
    *init = InitScheme::kAuto;
  } else if (name == "he") {
    *init = InitScheme::kHe;
  } else if (name == "xavier") {
    *init = InitScheme::kXavier;
  } else {
    return false;
  }
  return true;
}

bool ParsePrecision(const std::string& name, Precision* precision) {
  if (name == "fp32") {
    *precision = Precision::kFp32;
  } else if (name == "bf16") {
    *precision = Precision::kBf16;
  } else if (name == "fp16") {
    *precision = Precision::kFp16;
  } else {
    return false;
  }
  return true;
}

std::vector<GradBucket> MakeGradBuckets(const MlpShape& shape, int64_t min_floats) {
  std::vector<GradBucket> buckets;
  int last = shape.layers() - 1;
  for (int l = shape.layers() - 1; l >= 0; --l) {
    const int64_t floats = shape.layer_end(last) - shape.layer_begin(l);
    if (floats >= min_floats || l == 0) {
      buckets.push_back({l, last, shape.layer_begin(l), shape.layer_end(last)});
      last = l - 1;
    }
  }
  return buckets;
}

int MlpShape::max_width() const { return *std::max_element(widths.begin() + 1, widths.end()); }

MlpShape MlpShape::Make(int inputs, const std::vector<int>& hidden, int classes) {
  MlpShape s;
  s.widths.push_back(inputs);
  s.widths.insert(s.widths.end(), hidden.begin(), hidden.end());
  s.widths.push_back(classes);
  int64_t at = 0;
  for (int l = 0; l < s.layers(); ++l) {
    s.weight_offset.push_back(at);
    at = AlignUp(at + int64_t{s.in(l)} * s.out(l));
    s.bias_offset.push_back(at);
    at = AlignUp(at + s.out(l));
  }
  s.num_params = at;
  return s;
}

void InitParams(const MlpShape& shape, Activation act, uint64_t seed, float* params,
                InitScheme init) {
  std::fill(params, params + shape.num_params, 0.0f);
  if (init == InitScheme::kAuto)
    init = act == Activation::kTanh ? InitScheme::kXavier : InitScheme::kHe;
  for (int l = 0; l < shape.layers(); ++l) {
    const double fan_in = shape.in(l), fan_out = shape.out(l);
    const bool last = l == shape.layers() - 1;
    const double stddev = (last || init == InitScheme::kXavier)
                              ? std::sqrt(2.0 / (fan_in + fan_out))
                              : std::sqrt(2.0 / fan_in);
    Rng rng(MixSeed(seed, kInitStream, static_cast<uint64_t>(l)));
    float* w = params + shape.weight_offset[static_cast<size_t>(l)];
    const int64_t n = int64_t{shape.in(l)} * shape.out(l);
    for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(stddev * rng.Normal());
  }
}

}  // namespace sweep::trainer
