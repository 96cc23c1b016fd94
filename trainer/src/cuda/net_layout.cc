#include "cuda/net_layout.h"

#include <algorithm>

#include "cuda/cnn_ops.h"
#include "cuda/ops.h"
#include "cuda/replica_model.h"

namespace sweep::trainer::cuda {
namespace {

// Which fp32 outputs and gradients no pass touches, given the fusions and the batch norms our
// kernels surely run (each rule is the reason Net's passes leave that array alone).
void DropUntouched(const ModelSpec& model, NetLayout* lay, std::vector<char>* keep_out,
                   std::vector<char>* keep_grad) {
  const int L = static_cast<int>(model.layers.size());
  auto drop = [&](int i, bool out, bool grad) {
    if (out) (*keep_out)[static_cast<size_t>(i)] = 0;
    if (grad) (*keep_grad)[static_cast<size_t>(i)] = 0;
  };
  auto sure = [&](int i) { return i >= 0 && lay->sure_ours[static_cast<size_t>(i)]; };
  for (int i = 0; i < L; ++i) {
    const size_t at = static_cast<size_t>(i);
    const Layer& l = model.layer(i);
    // A ReLU run after its pool: the pool reads its input and writes its input's gradient.
    if (lay->relu_after_pool[at]) drop(i, true, true);
    // A linear layer whose ReLU its bias pass applies: backward reads the ReLU's gradient.
    if (lay->lin_relu[at] >= 0) drop(i, false, true);
    // Read only by the convolution after it, whose 16-bit data gradient it reads.
    if (l.kind == LayerKind::kActivation && lay->grad16[at] &&
        (l.input < 0 || lay->bn_relu[static_cast<size_t>(l.input)] != i)) {
      drop(i, false, true);
    }
    if (l.kind != LayerKind::kBatchNorm || !sure(i)) continue;
    // The convolution before writes its 16-bit output only; backward, its 16-bit gradient.
    if (lay->bn16[at]) drop(i - 1, true, true);
    const int a = lay->bn_relu[at];
    if (a >= 0) {
      drop(i, true, true);  // the ReLU's output and gradient stand in for the batch norm's
      // The convolution right after the ReLU leaves its gradient in 16 bits for the batch norm.
      if (a == i + 1 && lay->grad16[static_cast<size_t>(a)]) drop(a, false, true);
    }
    const int o = a >= 0 ? a : i;
    if (lay->half && lay->copy16_for[static_cast<size_t>(o)] >= 0) drop(o, true, false);
    const int p = lay->norm_pool[at];
    if (p < 0) continue;
    const int pair = lay->norm_pair[at];
    if (pair < 0) {
      drop(i, true, true);  // the pool's output and gradient stand in
      if (lay->grad16[static_cast<size_t>(p)]) drop(p, false, true);
    } else if (sure(pair)) {
      drop(i, true, true);  // the add after both gives the pool's output
      for (int j = 0; j < L; ++j) {
        if (lay->add_pool[static_cast<size_t>(j)] == p) drop(j, true, true);
      }
    }
  }
}

}  // namespace

NetOptions NetOptionsOf(const GroupSpec& spec) {
  NetOptions options;
  options.cudnn_autotune = spec.cudnn_autotune;
  return options;
}

NetLayout NetLayout::Make(const ModelSpec& model, int max_batch, Precision precision,
                          const NetOptions& options) {
  NetLayout lay;
  const size_t n = model.layers.size();
  const int L = static_cast<int>(n);
  lay.max_batch = max_batch;
  lay.half = precision != Precision::kFp32;
  lay.gown.resize(n);
  for (int i = 0; i < L; ++i) {
    const Layer& l = model.layer(i);
    lay.gown[static_cast<size_t>(i)] =
        l.kind == LayerKind::kFlatten && l.input >= 0 ? lay.gown[static_cast<size_t>(l.input)] : i;
  }
  std::vector<int> readers(n, 0), pool_readers(n, 0);
  for (const Layer& l : model.layers) {
    if (l.input >= 0) ++readers[static_cast<size_t>(l.input)];
    if (l.shortcut >= 0) ++readers[static_cast<size_t>(l.shortcut)];
    if (l.kind == LayerKind::kMaxPool && l.input >= 0) ++pool_readers[static_cast<size_t>(l.input)];
  }
  lay.relu_after_pool.assign(n, 0);
  for (int i = 0; i < L; ++i) {
    const Layer& l = model.layer(i);
    const size_t at = static_cast<size_t>(i);
    lay.relu_after_pool[at] = l.kind == LayerKind::kActivation && l.act == Activation::kRelu &&
                              l.input >= 0 && readers[at] == 1 && pool_readers[at] == 1;
  }
  lay.bn_relu.assign(n, -1);
  lay.copy16_for.assign(n, -1);
  lay.grad16.assign(n, 0);
  lay.bn16.assign(n, 0);
  // What layer a and j, its only reader, can share: a 16-bit input for a GEMM, a 16-bit
  // gradient from the convolution right after it, a ReLU inside a batch norm's passes, a
  // convolution's 16-bit output read by the batch norm right after it.
  const bool fuse16 = lay.half && options.fuse;
  // GEMM layers reading one layer (or the model's input) share the first one's 16-bit copy of
  // it; where they are all its readers, the layer writes that copy in its own pass.
  lay.in16_of.resize(n);
  std::vector<int> first_gemm(n + 1, -1), gemm_readers(n + 1, 0);  // by input + 1
  for (int j = 0; j < L; ++j) {
    const Layer& l = model.layer(j);
    lay.in16_of[static_cast<size_t>(j)] = j;
    if (!fuse16 || (l.kind != LayerKind::kConv && l.kind != LayerKind::kLinear)) continue;
    const size_t from = static_cast<size_t>(l.input + 1);
    if (first_gemm[from] < 0) first_gemm[from] = j;
    lay.in16_of[static_cast<size_t>(j)] = first_gemm[from];
    ++gemm_readers[from];
  }
  for (int a = 0; a < L; ++a) {
    const size_t from = static_cast<size_t>(a + 1);
    if (gemm_readers[from] > 1 && gemm_readers[from] == readers[static_cast<size_t>(a)]) {
      lay.copy16_for[static_cast<size_t>(a)] = first_gemm[from];
    }
  }
  for (int j = 0; j < L; ++j) {
    const Layer& l = model.layer(j);
    const int a = l.input;
    if (a < 0 || readers[static_cast<size_t>(a)] != 1) continue;
    const Layer& from = model.layer(a);
    const bool gemm = l.kind == LayerKind::kConv || l.kind == LayerKind::kLinear;
    const bool act = l.kind == LayerKind::kActivation;
    if (fuse16 && gemm) lay.copy16_for[static_cast<size_t>(a)] = j;
    lay.grad16[static_cast<size_t>(a)] = fuse16 && l.kind == LayerKind::kConv && j == a + 1 &&
                                         from.kind == LayerKind::kActivation &&
                                         !lay.relu_after_pool[static_cast<size_t>(a)];
    lay.bn16[static_cast<size_t>(j)] = fuse16 && l.kind == LayerKind::kBatchNorm && a == j - 1 &&
                                       from.kind == LayerKind::kConv && from.bias_at < 0;
    if (act && l.act == Activation::kRelu && from.kind == LayerKind::kBatchNorm &&
        !lay.relu_after_pool[static_cast<size_t>(j)]) {
      lay.bn_relu[static_cast<size_t>(a)] = j;
    }
  }
  lay.lin_relu.assign(n, -1);
  for (int j = 0; j < L && options.fuse; ++j) {
    const Layer& l = model.layer(j);
    const int i = l.input;
    if (l.kind != LayerKind::kActivation || l.act != Activation::kRelu || i < 0 ||
        readers[static_cast<size_t>(i)] != 1 || lay.relu_after_pool[static_cast<size_t>(j)] ||
        lay.grad16[static_cast<size_t>(j)]) {
      continue;
    }
    const Layer& from = model.layer(i);
    if (from.kind == LayerKind::kLinear && from.bias_at >= 0) {
      lay.lin_relu[static_cast<size_t>(i)] = j;
    }
  }
  // Through a flatten (no pass of its own): the layer it views writes the GEMM's copy (a pool
  // before a classifier's first linear layer), where it has no other reader.
  for (int f = 0; f < L && fuse16; ++f) {
    const Layer& l = model.layer(f);
    const int a = l.input;
    if (l.kind != LayerKind::kFlatten || a < 0 || readers[static_cast<size_t>(a)] != 1) continue;
    const int j = lay.copy16_for[static_cast<size_t>(f)];
    if (j >= 0 && lay.copy16_for[static_cast<size_t>(a)] < 0) {
      lay.copy16_for[static_cast<size_t>(a)] = j;
    }
  }
  // A batch norm's max pool, read through a ReLU that runs after it or directly; its windows
  // side by side (stride == kernel) and its indices within an int (BnPool), with room to spare.
  // Or a residual block's end: an add of two batch norms, each read only by it.
  lay.norm_pool.assign(n, -1);
  lay.norm_pair.assign(n, -1);
  lay.add_pool.assign(n, -1);
  auto lone_norm = [&](int i) {
    return i >= 0 && readers[static_cast<size_t>(i)] == 1 &&
           model.layer(i).kind == LayerKind::kBatchNorm;
  };
  for (int p = 0; p < L && options.fuse; ++p) {
    const Layer& pool = model.layer(p);
    if (pool.kind != LayerKind::kMaxPool || pool.input < 0) continue;
    int i = pool.input;
    if (readers[static_cast<size_t>(i)] != 1) continue;
    if (lay.relu_after_pool[static_cast<size_t>(i)]) i = model.layer(i).input;
    if (i < 0 || readers[static_cast<size_t>(i)] != 1 || pool.stride != pool.kernel ||
        int64_t{max_batch} * pool.in_shape.size() >= (int64_t{1} << 30)) {
      continue;
    }
    if (const Layer& sum = model.layer(i); sum.kind == LayerKind::kAdd) {
      const int u = sum.input, s = sum.shortcut;
      if (u == s || !lone_norm(u) || !lone_norm(s)) continue;
      lay.norm_pool[static_cast<size_t>(u)] = lay.norm_pool[static_cast<size_t>(s)] = p;
      lay.norm_pair[static_cast<size_t>(u)] = s;
      lay.norm_pair[static_cast<size_t>(s)] = u;
      lay.add_pool[static_cast<size_t>(i)] = p;
      // No 16-bit gradient from a convolution after the pool: the shortcut's convolution,
      // between the two batch norms' backward, overwrites the 16-bit data gradient.
      continue;
    }
    if (!lone_norm(i)) continue;
    lay.norm_pool[static_cast<size_t>(i)] = p;
    // bf16 / fp16: a convolution right after the pool leaves its 16-bit data gradient for the
    // batch norm to read (with the ReLU's mask), as it does for an activation before it; only
    // where nothing runs between them (a convolution's backward would overwrite it).
    lay.grad16[static_cast<size_t>(p)] =
        fuse16 && p + 1 < L && readers[static_cast<size_t>(p)] == 1 &&
        model.layer(p + 1).kind == LayerKind::kConv && model.layer(p + 1).input == p &&
        p - i == (pool.input == i ? 1 : 2) && (pool.input == i || pool.input == i + 1);
  }
  lay.direct_conv.assign(n, 0);
  for (int i = 0; i < L && options.direct_conv; ++i) {
    const Layer& l = model.layer(i);
    if (l.kind != LayerKind::kConv || l.input >= 0) continue;
    const cpu::ConvShape shape = ConvShapeOf(l, max_batch);
    if (!direct_conv_supported(shape)) continue;
    lay.direct_conv[static_cast<size_t>(i)] = 1;
    lay.direct_scratch = std::max(lay.direct_scratch, direct_conv_scratch_bytes(shape));
  }
  lay.sure_ours.assign(n, 0);
  for (int i = 0; i < L; ++i) {
    const size_t at = static_cast<size_t>(i);
    lay.sure_ours[at] = model.layer(i).kind == LayerKind::kBatchNorm &&
                        (options.ours_norm_only || (lay.bn16[at] && !options.cudnn_autotune));
  }

  std::vector<char> keep_out(n, 1), keep_grad(n, 1);
  DropUntouched(model, &lay, &keep_out, &keep_grad);
  lay.out.assign(n, 0);
  lay.grad.assign(n, 0);
  lay.mask.assign(n, 0);
  lay.argmax.assign(n, 0);
  lay.norm.assign(n, 0);
  lay.in16.assign(n, 0);
  lay.conv16.assign(n, 0);
  lay.in16_shared.assign(n, 0);
  const int64_t B = max_batch;
  int64_t widest_in = 0, widest_weight = 0, widest_bn = 0, conv_out = 0, conv_in = 0, gemm_out = 0;
  for (int i = 0; i < L; ++i) {
    const size_t at = static_cast<size_t>(i);
    const Layer& l = model.layer(i);
    const int64_t rows_out = B * l.out_shape.size();
    widest_in = std::max(widest_in, l.in_shape.size());
    if (l.kind != LayerKind::kFlatten && keep_out[at]) lay.out[at] = rows_out;
    if (lay.gown[at] == i && keep_grad[at]) lay.grad[at] = rows_out;
    switch (l.kind) {
      case LayerKind::kDropout:
        lay.mask[at] = rows_out;
        break;
      case LayerKind::kMaxPool:
        lay.argmax[at] = rows_out;
        break;
      case LayerKind::kBatchNorm:
        lay.norm[at] = l.in_shape.c;
        lay.bn_scratch = std::max(
            lay.bn_scratch, batchnorm_scratch_bytes(B * l.in_shape.h * l.in_shape.w, l.in_shape.c));
        widest_bn = std::max(widest_bn, int64_t{l.in_shape.c});
        break;
      case LayerKind::kConv:
        widest_weight =
            std::max(widest_weight, int64_t{l.out} * l.kernel * l.kernel * l.in_shape.c);
        if (l.bias_at >= 0) {
          lay.bias_scratch =
              std::max(lay.bias_scratch,
                       BiasGradScratchFloats(max_batch * l.out_shape.h * l.out_shape.w, l.out));
        }
        break;
      case LayerKind::kLinear:
        if (l.bias_at >= 0) {
          lay.bias_scratch = std::max(lay.bias_scratch, BiasGradScratchFloats(max_batch, l.out));
        }
        break;
      default:
        break;
    }
    if (!lay.half || (l.kind != LayerKind::kConv && l.kind != LayerKind::kLinear)) continue;
    gemm_out = std::max(gemm_out, l.out_shape.size());
    if (l.kind == LayerKind::kConv) {
      // Its 16-bit output goes to the batch norm after it, or is widened into its fp32 one.
      if (keep_out[at]) conv_out = std::max(conv_out, l.out_shape.size());
      conv_in = std::max(conv_in, l.in_shape.size());
    }
    // A direct convolution reads the fp32 input itself: a copy only for GEMMs sharing it, or
    // for cuDNN's side where autotuning may choose it.
    lay.in16_shared[at] = std::count(lay.in16_of.begin(), lay.in16_of.end(), i) > 1;
    if (lay.in16_of[at] == i &&
        (!lay.direct_conv[at] || lay.in16_shared[at] || options.cudnn_autotune)) {
      lay.in16[at] = B * l.in_shape.size();
    }
    if (i + 1 < L && lay.bn16[at + 1]) lay.conv16[at] = rows_out;
  }
  if (lay.half) {
    lay.h_out = B * conv_out;
    lay.h_d = B * gemm_out;
    lay.h_dx = B * conv_in;
    lay.h_dw = widest_weight;
  }
  lay.dtmp = B * widest_in;
  lay.dw_tmp = widest_weight;
  lay.bn_stride = (widest_bn + 3) / 4 * 4;
  lay.input = B * model.input.size();
  return lay;
}

double NetLayout::ActivationBytes() const {
  double floats = 0, halves = 0, ints = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    floats += static_cast<double>(out[i] + grad[i] + mask[i] + 2 * norm[i]);
    ints += static_cast<double>(argmax[i]);
    halves += static_cast<double>(in16[i] + conv16[i]);
  }
  halves += static_cast<double>(h_out + h_d + h_dx + h_dw);
  floats += static_cast<double>(dtmp + dw_tmp + bias_scratch + 2 * bn_stride + max_batch);
  floats += static_cast<double>(ReplicaModel::kInputSlots) * static_cast<double>(input);
  ints += static_cast<double>(ReplicaModel::kInputSlots) * max_batch;
  // The loss and evaluation's sums (three 8-byte words); batch norm's and the direct
  // convolutions' scratch, in bytes.
  return 4 * floats + 2 * halves + 4 * ints + 3 * 8 + static_cast<double>(bn_scratch) +
         static_cast<double>(direct_scratch);
}

}  // namespace sweep::trainer::cuda
