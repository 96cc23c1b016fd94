// The layer description: shapes, the parameter layout, MLP and CNN builders, JSON and the seeded
// initialisation. Owned by the trainer. Pure functions.
#include "model.h"

#include <algorithm>
#include <cmath>

#include "rng.h"
#include "trainer/trainer.h"

namespace sweep::trainer {
namespace {

using json = nlohmann::json;

constexpr int64_t kAlignFloats = 16;         // 64 bytes
constexpr uint64_t kInitStream = 0x1A17ull;  // keeps init draws apart from shuffle draws

int64_t AlignUp(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

std::string ShapeText(TensorShape s) {
  return std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

constexpr std::pair<LayerKind, const char*> kKindNames[] = {
    {LayerKind::kLinear, "linear"},
    {LayerKind::kConv, "conv2d"},
    {LayerKind::kBatchNorm, "batch_norm"},
    {LayerKind::kActivation, "activation"},
    {LayerKind::kMaxPool, "max_pool"},
    {LayerKind::kAvgPool, "avg_pool"},
    {LayerKind::kGlobalAvgPool, "global_avg_pool"},
    {LayerKind::kFlatten, "flatten"},
    {LayerKind::kDropout, "dropout"},
    {LayerKind::kAdd, "add"}};

// Layers by kind, the fields that kind reads set; the rest keep their defaults.
Layer Linear(int units) {
  Layer l;
  l.kind = LayerKind::kLinear;
  l.out = units;
  return l;
}

Layer Act(Activation act) {
  Layer l;
  l.kind = LayerKind::kActivation;
  l.act = act;
  return l;
}

Layer Dropout(float p) {
  Layer l;
  l.kind = LayerKind::kDropout;
  l.p = p;
  return l;
}

Layer Window(LayerKind kind, int out, int kernel, int stride, int pad) {
  Layer l;
  l.kind = kind;
  l.out = out;
  l.kernel = kernel;
  l.stride = stride;
  l.pad = pad;
  return l;
}

Layer Plain(LayerKind kind) {
  Layer l;
  l.kind = kind;
  return l;
}

}  // namespace

const char* LayerKindName(LayerKind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "?";
}

cpu::ConvShape ConvShapeOf(const Layer& l, int B) {
  cpu::ConvShape s;
  s.B = B;
  s.H = l.in_shape.h;
  s.W = l.in_shape.w;
  s.C = l.in_shape.c;
  s.OC = l.out;
  s.K = l.kernel;
  s.stride = l.stride;
  s.pad = l.pad;
  return s;
}

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

const char* ActivationName(Activation act) {
  switch (act) {
    case Activation::kRelu:
      return "relu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kGelu:
      return "gelu";
    case Activation::kNone:
      break;
  }
  return "none";
}

bool ParseInit(const std::string& name, InitScheme* init) {
  if (name == "auto") {
    *init = InitScheme::kAuto;
  } else if (name == "he") {
    *init = InitScheme::kHe;
  } else if (name == "xavier") {
    *init = InitScheme::kXavier;
  } else if (name == "pytorch") {
    *init = InitScheme::kPytorch;
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

int64_t Layer::fan_in() const {
  return kind == LayerKind::kConv ? int64_t{in_shape.c} * kernel * kernel : in_shape.size();
}

Status ModelSpec::Finish() {
  num_params = num_buffers = 0;
  param_layers.clear();
  int dropouts = 0;
  auto bad = [](size_t i, const Layer& l, const std::string& why) {
    return Status::InvalidArgument("layer " + std::to_string(i) + " (" + LayerKindName(l.kind) +
                                   "): " + why);
  };
  if (input.size() < 1) return Status::InvalidArgument("model: empty input");
  for (size_t i = 0; i < layers.size(); ++i) {
    Layer& l = layers[i];
    if (l.input >= static_cast<int>(i) || l.input < -1 || l.shortcut >= static_cast<int>(i) ||
        l.shortcut < -1) {
      return bad(i, l, "reads a layer that is not before it");
    }
    l.in_shape = shape_of(l.input);
    const TensorShape in = l.in_shape;
    TensorShape out = in;
    l.weight = l.bias_at = l.stats = -1;
    l.param_index = l.dropout_index = -1;
    switch (l.kind) {
      case LayerKind::kLinear:
        if (l.out < 1) return bad(i, l, "needs at least one unit");
        out = {l.out, 1, 1};
        break;
      case LayerKind::kConv: {
        if (l.out < 1) return bad(i, l, "needs at least one channel");
        if (l.kernel < 1 || l.stride < 1 || l.pad < 0) return bad(i, l, "bad window");
        const int h = in.h + 2 * l.pad - l.kernel, w = in.w + 2 * l.pad - l.kernel;
        if (h < 0 || w < 0) {
          return bad(i, l,
                     "kernel " + std::to_string(l.kernel) + " is larger than its input " +
                         ShapeText(in) + " (with padding " + std::to_string(l.pad) + ")");
        }
        out = {l.out, h / l.stride + 1, w / l.stride + 1};
        break;
      }
      case LayerKind::kMaxPool:
      case LayerKind::kAvgPool:
        if (l.kernel < 1 || l.stride < 1) return bad(i, l, "bad window");
        if (in.h < l.kernel || in.w < l.kernel) {
          return bad(i, l,
                     "a " + std::to_string(l.kernel) + "x" + std::to_string(l.kernel) +
                         " pool does not fit its input " + ShapeText(in));
        }
        out = {in.c, (in.h - l.kernel) / l.stride + 1, (in.w - l.kernel) / l.stride + 1};
        break;
      case LayerKind::kGlobalAvgPool:
        out = {in.c, 1, 1};
        break;
      case LayerKind::kFlatten:
        out = {static_cast<int>(in.size()), 1, 1};
        break;
      case LayerKind::kAdd:
        if (shape_of(l.shortcut) != in) {
          return bad(i, l,
                     "adds " + ShapeText(in) + " to " + ShapeText(shape_of(l.shortcut)) +
                         " (shapes must agree)");
        }
        break;
      case LayerKind::kDropout:
        if (!(l.p >= 0 && l.p < 1)) return bad(i, l, "drop probability must be in [0, 1)");
        l.dropout_index = dropouts++;
        break;
      case LayerKind::kBatchNorm:
        if (!(l.eps > 0) || !(l.momentum >= 0 && l.momentum <= 1)) {
          return bad(i, l, "needs eps > 0 and momentum in [0, 1]");
        }
        break;
      case LayerKind::kActivation:
        break;
    }
    l.out_shape = out;
    // Parameters: weight (or gamma) then bias (or beta), each 64-byte aligned.
    int64_t weight_floats = 0, bias_floats = 0;
    if (l.kind == LayerKind::kLinear) {
      weight_floats = in.size() * l.out;
      bias_floats = l.bias ? l.out : 0;
    } else if (l.kind == LayerKind::kConv) {
      weight_floats = int64_t{l.out} * l.kernel * l.kernel * in.c;
      bias_floats = l.bias ? l.out : 0;
    } else if (l.kind == LayerKind::kBatchNorm) {
      weight_floats = bias_floats = in.c;
      l.stats = num_buffers;
      num_buffers += 2 * int64_t{in.c};
    }
    l.begin = l.end = num_params;
    if (weight_floats > 0) {
      l.param_index = static_cast<int>(param_layers.size());
      param_layers.push_back(static_cast<int>(i));
      l.weight = num_params;
      num_params = AlignUp(num_params + weight_floats);
      if (bias_floats > 0) {
        l.bias_at = num_params;
        num_params = AlignUp(num_params + bias_floats);
      }
      l.end = num_params;
    }
  }
  if (layers.empty() || shape_of(static_cast<int>(layers.size()) - 1) != TensorShape{classes}) {
    return Status::InvalidArgument("model: the last layer must give one output per class");
  }
  return Status::Ok();
}

double ModelSpec::ForwardMacs() const {
  double macs = 0;
  for (const Layer& l : layers) {
    if (l.kind == LayerKind::kLinear) macs += static_cast<double>(l.in_shape.size()) * l.out;
    if (l.kind == LayerKind::kConv) {
      macs += static_cast<double>(l.out_shape.size()) * static_cast<double>(l.fan_in());
    }
  }
  return macs;
}

int64_t ModelSpec::ActivationFloats() const {
  int64_t n = input.size();
  for (const Layer& l : layers) n += l.out_shape.size();
  return n;
}

bool ModelSpec::HasBatchNorm() const {
  return std::any_of(layers.begin(), layers.end(),
                     [](const Layer& l) { return l.kind == LayerKind::kBatchNorm; });
}

json ModelSpec::ToJson() const {
  json ls = json::array();
  for (const Layer& l : layers) {
    json j = {{"kind", LayerKindName(l.kind)}, {"input", l.input}};
    switch (l.kind) {
      case LayerKind::kLinear:
        j["out"] = l.out;
        j["bias"] = l.bias;
        break;
      case LayerKind::kConv:
        j["out"] = l.out;
        j["kernel"] = l.kernel;
        j["stride"] = l.stride;
        j["pad"] = l.pad;
        j["bias"] = l.bias;
        break;
      case LayerKind::kMaxPool:
      case LayerKind::kAvgPool:
        j["kernel"] = l.kernel;
        j["stride"] = l.stride;
        break;
      case LayerKind::kBatchNorm:
        j["momentum"] = l.momentum;
        j["eps"] = l.eps;
        break;
      case LayerKind::kActivation:
        j["act"] = ActivationName(l.act);
        break;
      case LayerKind::kDropout:
        j["p"] = l.p;
        break;
      case LayerKind::kAdd:
        j["shortcut"] = l.shortcut;
        break;
      case LayerKind::kGlobalAvgPool:
      case LayerKind::kFlatten:
        break;
    }
    ls.push_back(std::move(j));
  }
  return {{"input", {input.c, input.h, input.w}}, {"classes", classes}, {"layers", ls}};
}

Result<ModelSpec> ModelSpec::FromJson(const json& j) {
  ModelSpec m;
  try {
    const json& in = j.at("input");
    m.input = {in.at(0).get<int>(), in.at(1).get<int>(), in.at(2).get<int>()};
    m.classes = j.at("classes").get<int>();
    for (const json& lj : j.at("layers")) {
      Layer l;
      const std::string kind = lj.at("kind").get<std::string>();
      bool known = false;
      for (const auto& [k, name] : kKindNames) {
        if (kind == name) {
          l.kind = k;
          known = true;
        }
      }
      if (!known) return Status::InvalidArgument("unknown layer kind \"" + kind + "\"");
      l.input = lj.at("input").get<int>();
      l.out = lj.value("out", 0);
      l.kernel = lj.value("kernel", 1);
      l.stride = lj.value("stride", 1);
      l.pad = lj.value("pad", 0);
      l.bias = lj.value("bias", true);
      l.momentum = lj.value("momentum", 0.1f);
      l.eps = lj.value("eps", 1e-5f);
      l.p = lj.value("p", 0.0f);
      l.shortcut = lj.value("shortcut", -1);
      if (l.kind == LayerKind::kActivation &&
          !ParseActivation(lj.at("act").get<std::string>(), &l.act)) {
        return Status::InvalidArgument("unknown activation " + lj.at("act").dump());
      }
      m.layers.push_back(l);
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("model description: ") + e.what());
  }
  SWEEP_RETURN_IF_ERROR(m.Finish());
  return m;
}

ModelSpec ModelSpec::Mlp(int inputs, const std::vector<int>& hidden, int classes, Activation act,
                         float dropout) {
  ModelSpec m;
  m.input = {inputs, 1, 1};
  m.classes = classes;
  auto add = [&m](Layer l) {
    l.input = static_cast<int>(m.layers.size()) - 1;
    m.layers.push_back(l);
  };
  for (int h : hidden) {
    add(Linear(h));
    add(Act(act));
    if (dropout > 0) add(Dropout(dropout));
  }
  add(Linear(classes));
  (void)m.Finish();  // an MLP of positive widths always finishes
  return m;
}

Result<ModelSpec> BuildModel(const TrainOptions& o, TensorShape input, int classes) {
  Activation act = Activation::kRelu;
  ParseActivation(o.activation, &act);
  const float dropout = static_cast<float>(o.dropout);
  if (o.model == "mlp") {
    ModelSpec m = ModelSpec::Mlp(static_cast<int>(input.size()), o.hidden, classes, act, dropout);
    SWEEP_RETURN_IF_ERROR(m.Finish());
    return m;
  }
  ModelSpec m;
  m.input = input;
  m.classes = classes;
  auto add = [&m](Layer l, int from) {
    l.input = from;
    m.layers.push_back(l);
    return static_cast<int>(m.layers.size()) - 1;
  };
  int at = -1;
  TensorShape shape = input;
  const int k = o.kernel_size, pad = (o.kernel_size - 1) / 2;
  auto conv_bn = [&](int from, int out, int kernel, int stride, int p, bool activate) {
    Layer conv = Window(LayerKind::kConv, out, kernel, stride, p);
    conv.bias = !o.batch_norm;
    int l = add(conv, from);
    if (o.batch_norm) {
      Layer bn = Plain(LayerKind::kBatchNorm);
      bn.momentum = static_cast<float>(o.bn_momentum);
      bn.eps = static_cast<float>(o.bn_eps);
      l = add(bn, l);
    }
    if (activate) l = add(Act(act), l);
    return l;
  };
  for (size_t s = 0; s < o.channels.size(); ++s) {
    const int c = o.channels[s];
    const std::string stage = "stage " + std::to_string(s + 1) + " of " +
                              std::to_string(o.channels.size()) + " (" + std::to_string(c) +
                              " channels)";
    if (shape.h < 2 || shape.w < 2) {
      int stages = 0;
      for (int side = std::min(input.h, input.w); side >= 2; side /= 2) ++stages;
      return Status::InvalidArgument(
          "channels: " + stage + " would start from a " + std::to_string(shape.h) + "x" +
          std::to_string(shape.w) + " input, too small for its 2x2 pool (" +
          std::to_string(input.h) + "x" + std::to_string(input.w) + " images allow at most " +
          std::to_string(stages) + " stages)");
    }
    if (k > shape.h || k > shape.w) {
      return Status::InvalidArgument("kernel_size: " + std::to_string(k) + " is larger than the " +
                                     std::to_string(shape.h) + "x" + std::to_string(shape.w) +
                                     " input of " + stage);
    }
    if (o.residual) {
      // ResNet basic blocks: conv-bn-act-conv-bn, plus the block's input (through a 1x1
      // projection where the channels change), then the activation. An odd count ends with a
      // block of one conv.
      for (int b = 0; b < (o.convs_per_stage + 1) / 2; ++b) {
        const int block_in = at;
        const bool pair = 2 * b + 1 < o.convs_per_stage;
        int body = conv_bn(at, c, k, 1, pad, pair);
        if (pair) body = conv_bn(body, c, k, 1, pad, false);
        const int shortcut = shape.c == c ? block_in : conv_bn(block_in, c, 1, 1, 0, false);
        Layer sum = Plain(LayerKind::kAdd);
        sum.shortcut = shortcut;
        at = add(sum, body);
        at = add(Act(act), at);
        shape.c = c;
      }
    } else {
      for (int j = 0; j < o.convs_per_stage; ++j) at = conv_bn(at, c, k, 1, pad, true);
      shape.c = c;
    }
    at = add(Window(o.pool == "avg" ? LayerKind::kAvgPool : LayerKind::kMaxPool, 0, 2, 2, 0), at);
    shape = {c, shape.h / 2, shape.w / 2};
  }
  at = add(Plain(o.global_pool ? LayerKind::kGlobalAvgPool : LayerKind::kFlatten), at);
  for (int h : o.hidden) {
    if (dropout > 0) at = add(Dropout(dropout), at);
    at = add(Linear(h), at);
    at = add(Act(act), at);
  }
  if (dropout > 0) at = add(Dropout(dropout), at);
  add(Linear(classes), at);
  SWEEP_RETURN_IF_ERROR(m.Finish());
  return m;
}

MlpShape MlpShape::Make(int inputs, const std::vector<int>& hidden, int classes) {
  MlpView view;
  AsMlp(ModelSpec::Mlp(inputs, hidden, classes, Activation::kRelu), &view);
  return view.shape;
}

int MlpShape::max_width() const { return *std::max_element(widths.begin() + 1, widths.end()); }

bool AsMlp(const ModelSpec& model, MlpView* view) {
  MlpView v;
  v.shape.widths.push_back(static_cast<int>(model.input.size()));
  bool act_seen = false;
  int i = 0;
  const int n = static_cast<int>(model.layers.size());
  while (i < n) {
    const Layer& lin = model.layer(i);
    if (lin.kind != LayerKind::kLinear || !lin.bias || lin.input != i - 1) return false;
    v.shape.widths.push_back(lin.out);
    v.shape.weight_offset.push_back(lin.weight);
    v.shape.bias_offset.push_back(lin.bias_at);
    ++i;
    if (i == n) break;
    const Layer& a = model.layer(i);
    if (a.kind != LayerKind::kActivation || (act_seen && a.act != v.act)) return false;
    v.act = a.act;
    act_seen = true;
    ++i;
    if (i < n && model.layer(i).kind == LayerKind::kDropout) {
      if (v.dropout > 0 && model.layer(i).p != v.dropout) return false;
      v.dropout = model.layer(i).p;
      ++i;
    } else if (v.dropout > 0) {
      return false;
    }
  }
  v.shape.num_params = model.num_params;
  *view = std::move(v);
  return true;
}

std::vector<GradBucket> MakeGradBuckets(const ModelSpec& model, int64_t min_floats) {
  std::vector<GradBucket> buckets;
  const int P = static_cast<int>(model.param_layers.size());
  auto begin = [&](int k) { return model.layer(model.param_layers[static_cast<size_t>(k)]).begin; };
  auto end = [&](int k) { return k + 1 < P ? begin(k + 1) : model.num_params; };
  int last = P - 1;
  for (int k = P - 1; k >= 0; --k) {
    if (end(last) - begin(k) >= min_floats || k == 0) {
      buckets.push_back({k, last, begin(k), end(last)});
      last = k - 1;
    }
  }
  return buckets;
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

void InitParams(const ModelSpec& model, uint64_t seed, float* params, float* buffers,
                InitScheme init) {
  std::fill(params, params + model.num_params, 0.0f);
  if (init == InitScheme::kAuto) {
    init = InitScheme::kHe;
    for (const Layer& l : model.layers) {
      if (l.kind == LayerKind::kActivation) {
        init = l.act == Activation::kTanh ? InitScheme::kXavier : InitScheme::kHe;
        break;
      }
    }
  }
  const int P = static_cast<int>(model.param_layers.size());
  for (int k = 0; k < P; ++k) {
    const Layer& l = model.layer(model.param_layers[static_cast<size_t>(k)]);
    if (l.kind == LayerKind::kBatchNorm) {
      std::fill_n(params + l.weight, l.in_shape.c, 1.0f);
      continue;
    }
    const double fan_in = static_cast<double>(l.fan_in());
    const double fan_out =
        static_cast<double>(l.out) *
        (l.kind == LayerKind::kConv ? static_cast<double>(l.kernel) * l.kernel : 1.0);
    const bool last = k == P - 1;
    Rng rng(MixSeed(seed, kInitStream, static_cast<uint64_t>(k)));
    float* w = params + l.weight;
    const int64_t n =
        l.kind == LayerKind::kConv ? int64_t{l.out} * l.fan_in() : l.in_shape.size() * l.out;
    if (init == InitScheme::kPytorch) {
      // nn.Linear's and nn.Conv2d's reset_parameters: kaiming_uniform(a = sqrt(5)) comes to this
      // bound for the weights, and the biases take the same one.
      const double bound = 1.0 / std::sqrt(fan_in);
      auto draw = [&] { return static_cast<float>(bound * (2.0 * rng.Uniform() - 1.0)); };
      for (int64_t i = 0; i < n; ++i) w[i] = draw();
      if (l.bias_at >= 0) {
        for (int i = 0; i < l.out; ++i) params[l.bias_at + i] = draw();
      }
      continue;
    }
    const double stddev = (last || init == InitScheme::kXavier)
                              ? std::sqrt(2.0 / (fan_in + fan_out))
                              : std::sqrt(2.0 / fan_in);
    for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(stddev * rng.Normal());
  }
  if (buffers != nullptr) InitStats(model, buffers);
}

void InitStats(const ModelSpec& model, float* buffers) {
  for (const Layer& l : model.layers) {
    if (l.kind != LayerKind::kBatchNorm) continue;
    std::fill_n(buffers + l.stats, l.in_shape.c, 0.0f);
    std::fill_n(buffers + l.stats + l.in_shape.c, l.in_shape.c, 1.0f);
  }
}

}  // namespace sweep::trainer
