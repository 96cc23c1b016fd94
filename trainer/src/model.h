// The MLP's backend-neutral description: layer widths and where each tensor sits in the flat
// parameter buffer, plus the seeded initialisation. Parameters, gradients and optimizer state
// each live in one contiguous buffer of this layout (as in llm.c), so a later data-parallel
// trainer can all-reduce gradients in buckets and a CUDA backend can copy it in one go.
// Plain values and pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpu/ops.h"

namespace sweep::trainer {

// Backends share the activation names; the enum is the CPU kernels' own.
using Activation = cpu::Activation;

// relu | tanh | gelu; false for anything else.
bool ParseActivation(const std::string& name, Activation* act);

// How hidden layers' weights are drawn: He-normal (std sqrt(2 / fan_in), for rectifiers),
// Xavier-normal (std sqrt(2 / (fan_in + fan_out))), or auto: He for relu and gelu, Xavier for tanh.
enum class InitScheme { kAuto, kHe, kXavier };

// auto | he | xavier; false for anything else.
bool ParseInit(const std::string& name, InitScheme* init);

// The numbers the GEMMs multiply: fp32 (on a GPU, TF32 tensor-core products), or bf16 / fp16
// inputs with fp32 accumulation. Master weights, optimizer state, activations kept for the
// elementwise kernels and gradients stay fp32 in every mode.
enum class Precision { kFp32, kBf16, kFp16 };

// fp32 | bf16 | fp16; false for anything else.
bool ParsePrecision(const std::string& name, Precision* precision);

struct MlpShape {
  std::vector<int> widths;  // input, hidden..., classes
  // Offsets (in floats) of layer l's weight [widths[l+1], widths[l]] and bias [widths[l+1]].
  // Each tensor starts on a 64-byte boundary; the padding between them stays zero.
  std::vector<int64_t> weight_offset, bias_offset;
  int64_t num_params = 0;  // including padding

  int layers() const { return static_cast<int>(widths.size()) - 1; }
  int in(int l) const { return widths[static_cast<size_t>(l)]; }
  int out(int l) const { return widths[static_cast<size_t>(l) + 1]; }
  int max_width() const;  // widest layer output: sizes the activation buffers
  // Layer l's weight and bias as one contiguous range [layer_begin, layer_end) of the flat
  // buffer: the unit in which gradients become final during backward (an all-reduce bucket).
  int64_t layer_begin(int l) const { return weight_offset[static_cast<size_t>(l)]; }
  int64_t layer_end(int l) const {
    return l + 1 < layers() ? weight_offset[static_cast<size_t>(l) + 1] : num_params;
  }

  static MlpShape Make(int inputs, const std::vector<int>& hidden, int classes);
};

// A gradient bucket of the data-parallel all-reduce: layers [first_layer, last_layer], which are
// the contiguous range [begin, end) of the flat buffer. Backward finishes layers last to first,
// so a bucket is complete once backward has finished first_layer.
struct GradBucket {
  int first_layer = 0, last_layer = 0;
  int64_t begin = 0, end = 0;
};

// Buckets in the order backward completes them (the last layers' first): consecutive layers
// from the output down are gathered until a bucket holds at least min_floats floats; the input
// layer closes the last one. min_floats <= 1 gives one bucket per layer. Together they cover
// [0, num_params) once.
std::vector<GradBucket> MakeGradBuckets(const MlpShape& shape, int64_t min_floats);

// Fills params (shape.num_params floats) from the trial seed: hidden weights by `init`, the
// output layer Xavier-normal whatever `init` says (it feeds a softmax, not a rectifier), biases
// and padding zero. The same seed gives the same bits on every build.
void InitParams(const MlpShape& shape, Activation act, uint64_t seed, float* params,
                InitScheme init = InitScheme::kAuto);

}  // namespace sweep::trainer
