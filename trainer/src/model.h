// A model as a sequence of layers: the one description every backend builds from (the CPU's
// cpu/net.h, the CUDA backend's MLP through MlpView). Layers run in order; each reads the output
// of an earlier layer (residual blocks: an add reads two), so backward is the same list walked
// back. Parameters, gradients and optimizer state each live in one flat buffer whose layout this
// description fixes (as in llm.c), so gradients all-reduce in buckets of whole layers and a
// checkpoint is one copy. Batch norm's running statistics live in a second flat buffer.
// Plain values and pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "cpu/conv_ops.h"
#include "cpu/ops.h"

namespace sweep::trainer {

struct TrainOptions;  // trainer/trainer.h

// Backends share the activation names; the enum is the CPU kernels' own.
using Activation = cpu::Activation;

// relu | tanh | gelu; false for anything else.
bool ParseActivation(const std::string& name, Activation* act);
const char* ActivationName(Activation act);

// How weights are drawn: He-normal (std sqrt(2 / fan_in), for rectifiers), Xavier-normal
// (std sqrt(2 / (fan_in + fan_out))), auto (He for relu and gelu, Xavier for tanh), or PyTorch's
// layer defaults: weights and biases uniform in +-1 / sqrt(fan_in), the output layer too.
enum class InitScheme { kAuto, kHe, kXavier, kPytorch };

// auto | he | xavier | pytorch; false for anything else.
bool ParseInit(const std::string& name, InitScheme* init);

// The numbers the GEMMs multiply: fp32 (on a GPU, TF32 tensor-core products), or bf16 / fp16
// inputs with fp32 accumulation. Master weights, optimizer state, activations kept for the
// elementwise kernels and gradients stay fp32 in every mode.
enum class Precision { kFp32, kBf16, kFp16 };

// fp32 | bf16 | fp16; false for anything else.
bool ParsePrecision(const std::string& name, Precision* precision);

// One sample's tensor: channels x height x width, stored channels last (HWC, as NHWC for a
// batch). A flat vector is {features, 1, 1}.
struct TensorShape {
  int c = 1, h = 1, w = 1;
  int64_t size() const { return int64_t{c} * h * w; }
  bool operator==(const TensorShape&) const = default;
};

enum class LayerKind {
  kLinear,         // out = units: y = x W^T + b, W [units, in]; reads its input flattened
  kConv,           // out = channels: W [out, kernel, kernel, in channels], bias optional
  kBatchNorm,      // per channel: gamma, beta; running mean and variance in the buffers
  kActivation,     // act
  kMaxPool,        // kernel x kernel windows, stride
  kAvgPool,        // likewise
  kGlobalAvgPool,  // mean over height and width: {c, 1, 1}
  kFlatten,        // {c h w, 1, 1}: the same memory
  kDropout,        // p
  kAdd,            // input + shortcut (a residual block's end)
};

const char* LayerKindName(LayerKind kind);

struct Layer {
  LayerKind kind = LayerKind::kLinear;
  int input = -1;     // index of the layer whose output this one reads; -1: the model's input
  int shortcut = -1;  // kAdd: the other operand's layer (-1: the model's input)
  int out = 0;        // kLinear: units; kConv: output channels
  int kernel = 1;     // kConv, pools
  int stride = 1;     // kConv, pools
  int pad = 0;        // kConv: zeros on each side
  bool bias = true;   // kLinear, kConv
  Activation act = Activation::kRelu;  // kActivation
  float p = 0;                         // kDropout: drop probability
  float momentum = 0.1f;               // kBatchNorm: running = (1 - m) running + m batch
  float eps = 1e-5f;                   // kBatchNorm

  // Set by ModelSpec::Finish.
  TensorShape in_shape, out_shape;
  int64_t weight = -1;   // offset of the weight (batch norm: gamma) in the parameters; -1: none
  int64_t bias_at = -1;  // offset of the bias (batch norm: beta); -1: none
  int64_t stats = -1;    // kBatchNorm: offset of running mean [c], then running var [c]
  int64_t begin = 0, end = 0;  // this layer's range of the parameters (empty: none)
  int param_index = -1;        // among layers with parameters, in order; -1: none
  int dropout_index = -1;      // among dropout layers, in order (keys its masks)

  bool has_params() const { return param_index >= 0; }
  int64_t fan_in() const;  // inputs to one output: in features, or in channels x kernel^2
};

// A kConv layer over a batch of B samples, as the convolution kernels (CPU, cuDNN) take it.
cpu::ConvShape ConvShapeOf(const Layer& l, int B);

struct ModelSpec {
  TensorShape input;
  int classes = 0;
  std::vector<Layer> layers;  // the last one's output is the logits: {classes, 1, 1}

  // Set by Finish.
  int64_t num_params = 0;         // including padding (each tensor starts on a 64-byte boundary)
  int64_t num_buffers = 0;        // batch norm's running statistics
  std::vector<int> param_layers;  // indices of the layers with parameters, in order

  // Works out every layer's shapes and offsets. InvalidArgument names the layer and why (a
  // window larger than its input, a linear layer of no units, an add of unequal shapes).
  Status Finish();
  const Layer& layer(int i) const { return layers[static_cast<size_t>(i)]; }
  TensorShape shape_of(int i) const { return i < 0 ? input : layer(i).out_shape; }
  // Multiply-adds of one sample's forward pass (convolutions and linear layers).
  double ForwardMacs() const;
  // Floats of one sample's layer outputs: what the activations of a batch cost per row.
  int64_t ActivationFloats() const;
  bool HasBatchNorm() const;

  // The description as JSON (what checkpoints carry) and back; FromJson calls Finish.
  nlohmann::json ToJson() const;
  static Result<ModelSpec> FromJson(const nlohmann::json& j);

  // An MLP: linear layers of `hidden` units, each followed by `act` and, when dropout > 0, a
  // dropout layer, then the output layer.
  static ModelSpec Mlp(int inputs, const std::vector<int>& hidden, int classes, Activation act,
                       float dropout = 0);
};

// The model `o` describes for inputs of `input` shape and `classes` classes: model = "mlp" or
// "cnn" and their keys. InvalidArgument names the key that cannot be built (a stage whose input
// is already 1x1, a kernel larger than its input).
Result<ModelSpec> BuildModel(const TrainOptions& o, TensorShape input, int classes);

// The MLP case of a model, for a backend that trains only those (the CUDA one, for now).
struct MlpShape {
  std::vector<int> widths;  // input, hidden..., classes
  // Offsets (in floats) of layer l's weight [widths[l+1], widths[l]] and bias [widths[l+1]].
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

  // The shape of ModelSpec::Mlp(inputs, hidden, classes, ...): the same layout.
  static MlpShape Make(int inputs, const std::vector<int>& hidden, int classes);
};

// A model that is linear layers with one activation between them and dropout after it (or
// none) as an MlpShape, in the same parameter layout; false for anything else.
struct MlpView {
  MlpShape shape;
  Activation act = Activation::kRelu;
  float dropout = 0;
};
bool AsMlp(const ModelSpec& model, MlpView* view);

// A gradient bucket of the data-parallel all-reduce: parameter layers [first_layer,
// last_layer] (counted among the layers with parameters), the contiguous range [begin, end) of
// the flat buffer. Backward finishes layers last to first, so a bucket is complete once
// backward has finished first_layer.
struct GradBucket {
  int first_layer = 0, last_layer = 0;
  int64_t begin = 0, end = 0;
};

// Buckets in the order backward completes them (the last layers' first): consecutive layers
// from the output down are gathered until a bucket holds at least min_floats floats; the first
// layer closes the last one. min_floats <= 1 gives one bucket per layer. Together they cover
// [0, num_params) once.
std::vector<GradBucket> MakeGradBuckets(const ModelSpec& model, int64_t min_floats);
std::vector<GradBucket> MakeGradBuckets(const MlpShape& shape, int64_t min_floats);

// Fills params (model.num_params floats) from the trial seed: each weight by `init` with its
// fan-in (convolutions count channels x kernel^2), the output layer Xavier-normal whatever
// `init` says (it feeds a softmax, not a rectifier), batch norm's gamma 1, biases, beta and
// padding 0. Layer k among those with parameters draws from its own stream, so an MLP gets the
// same bits as before layers were general. buffers (num_buffers floats, may be null): running
// means 0, variances 1.
void InitParams(const ModelSpec& model, uint64_t seed, float* params, float* buffers,
                InitScheme init = InitScheme::kAuto);
// The running statistics' initial values alone (num_buffers floats).
void InitStats(const ModelSpec& model, float* buffers);

}  // namespace sweep::trainer
