// What a Net (cuda/net.h) fuses and which device buffers it holds, decided from its model,
// batch, precision and options alone, before anything is allocated. Net allocates exactly these
// buffers, and the memory check before training (cuda_backend.cc) counts the same ones, so the
// two cannot drift apart. An fp32 activation or gradient that no pass can read or write (its
// producer and readers run fused, whatever the net chooses at its first step) gets no buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"
#include "model.h"

namespace sweep::trainer::cuda {

// What a Net is made with besides its model, batch and precision.
struct NetOptions {
  // Each convolution's plans and each batch norm's kernels (cuDNN's or ours) timed on the device
  // (the trainer's cudnn_autotune).
  bool cudnn_autotune = false;
  // For tests: every batch norm's training pass through our kernels, never cuDNN's; and, with
  // fuse false, every 16-bit copy made in a pass of its own and every max pool in its own passes
  // (the unfused path, which the fused one must match bit for bit).
  bool ours_norm_only = false;
  bool fuse = true;
  // The model's first convolution through our direct kernels where they take its shape
  // (cuda/cnn_ops.h: a few input channels); false: through cuDNN, as every other.
  bool direct_conv = true;
};

// The options a group's replicas make their nets with, which the memory check reads too.
NetOptions NetOptionsOf(const GroupSpec& spec);

struct NetLayout {
  static NetLayout Make(const ModelSpec& model, int max_batch, Precision precision,
                        const NetOptions& options);

  // Bytes of every buffer below: what a Net allocates besides its parameters, gradients,
  // running statistics and 16-bit weights (cuDNN's workspace comes with its plans).
  double ActivationBytes() const;

  // ---- what runs fused, per layer ----
  // gown[i] names the buffer of the gradient w.r.t. layer i's output: a flatten shares its
  // input's.
  std::vector<int> gown;
  // relu_after_pool[i]: layer i is a ReLU whose only reader is a max pool, which then runs on
  // the ReLU's input and applies the ReLU to its 4x smaller output (and the ReLU's gradient to
  // its own), the same values bit for bit: a ReLU is monotonic and gives 0 where it cuts, so
  // max and ReLU commute and the cut windows pass no gradient either way (for finite inputs:
  // a NaN the pool would pass on, the ReLU ahead of it made 0).
  std::vector<char> relu_after_pool;
  // bn_relu[i]: the ReLU that is batch norm i's only reader (and not a max pool's: that one
  // runs after the pool), or -1. Where our kernels run the batch norm, they apply the ReLU in
  // the same passes, as the CPU's net does.
  std::vector<int> bn_relu;
  // With fuse: lin_relu[i], the ReLU that is linear layer i's only reader (i has a bias; the
  // ReLU's gradient is not left in 16 bits, grad16), or -1. The bias's pass applies it, forward
  // (writing its output and 16-bit copy) and backward (its mask with the bias's sums).
  std::vector<int> lin_relu;
  // bf16 / fp16 with fuse: copy16_for[i], the GEMM layer (convolution or linear) that is
  // layer i's only reader (or the first of the GEMMs that are all its readers), or -1. An
  // activation layer (or a max pool applying a ReLU, or our batch norm giving layer i's output)
  // writes that layer's 16-bit input in its own pass.
  std::vector<int> copy16_for;
  // bf16 / fp16: in16_of[j], the GEMM layer whose 16-bit input GEMM layer j reads: itself, or
  // with fuse the first GEMM reading the same layer (a residual block's body and projection),
  // whose copy it shares. copy16_for then names that first one, where GEMMs are all the readers.
  std::vector<int> in16_of;
  // bf16 / fp16 with fuse: grad16[a], activation a (or a max pool run in its batch norm's
  // passes, norm_pool) is read only by the convolution right after it, whose 16-bit data
  // gradient the activation's backward then reads itself, not widened first; or the batch norm
  // right before it, applying it, or running the pool. So a's fp32 gradient is left stale:
  // nothing else may read it, which its one reader guarantees.
  std::vector<char> grad16;
  // bf16 / fp16 with fuse: bn16[i], batch norm i reads convolution i - 1 (its only reader,
  // without bias) in 16 bits where our kernels run it: the convolution writes its 16-bit output
  // only, and the batch norm's backward writes the convolution's 16-bit output gradient.
  std::vector<char> bn16;
  // With fuse: norm_pool[i], the max pool reading batch norm i (directly, or through a ReLU
  // that runs after it), which our kernels run inside the batch norm's passes, or -1. The batch
  // norm's own output is then never written, nor the pool's input gradient.
  std::vector<int> norm_pool;
  // With fuse: norm_pair[i], the other batch norm an add sums with batch norm i before a max
  // pool (add_pool[j], that pool, for the add j), or -1. Each then computes its statistics
  // only; the add runs both apply passes with the sum and the pool, and each batch norm's
  // backward reads the pool's gradient (the add's copies are gone). Only where our kernels run
  // both.
  std::vector<int> norm_pair, add_pool;
  // direct_conv[i]: convolution i reads the model's input and runs our direct kernels, not
  // cuDNN's (NetOptions::direct_conv); with cudnn_autotune, the faster of the two, timed at
  // its first use (so its input's 16-bit copy and cuDNN's plans exist too).
  std::vector<char> direct_conv;
  // in16_shared[i]: another GEMM reads GEMM i's 16-bit input copy (in16_of).
  std::vector<char> in16_shared;
  // sure_ours[i]: batch norm i runs our kernels in every pass without cuDNN being asked (tests'
  // ours_norm_only, or bn16 without cudnn_autotune); elsewhere the first step decides.
  std::vector<char> sure_ours;

  // ---- buffers, in elements at max_batch rows (0: none) ----
  // Per layer: its fp32 output and the gradient w.r.t. it (by gown), dropout's mask, max
  // pooling's indices, batch norm's mean and invstd (each), a GEMM's 16-bit input (by in16_of),
  // a convolution's 16-bit output (bn16 after it).
  std::vector<int64_t> out, grad, mask, argmax, norm, in16, conv16;
  // 16-bit scratch: a convolution's output, a GEMM's output gradient, a convolution's input
  // gradient, its weight gradient.
  int64_t h_out = 0, h_d = 0, h_dx = 0, h_dw = 0;
  int64_t dtmp = 0;            // a gradient that must be added to one already written
  int64_t dw_tmp = 0;          // a convolution's weight gradient before it is added
  int64_t bias_scratch = 0;    // floats
  int64_t bn_scratch = 0;      // bytes
  int64_t direct_scratch = 0;  // bytes: the direct convolutions' weight-gradient partial sums
  int64_t bn_stride = 0;       // cuDNN's batch-norm dscale, then dbias this many floats on
  int64_t input = 0;           // one input slot's floats (and max_batch labels)
  int max_batch = 0;
  bool half = false;
};

}  // namespace sweep::trainer::cuda
