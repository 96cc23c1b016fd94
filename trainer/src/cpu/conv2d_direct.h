// The direct convolution kernels behind conv2d.cc (conv2d_direct.cc): AVX2/FMA, 16 output
// channels in vector lanes, on a zero-padded copy of each sample. Pure; scratch is the caller's.
#pragma once

#include <cstdint>

#include "cpu/conv_ops.h"

namespace sweep::trainer::cpu {

// Output channels in a kernel's two ymm registers: the direct kernels need OC (forward, weight
// gradient) or C (input gradient) to be a multiple of it.
inline constexpr int kLanes = 16;

// Whether this CPU runs the direct kernels (AVX2 and FMA; false off x86-64).
bool HaveAvx2();

// out [B, OH, OW, OC] (+)= conv of inp [B, H, W, C] with wp packed [OC / 16][K][K][C][16].
// scratch: (H + 2 pad) x (W + 2 pad) x C floats.
void DirectConv(float* out, const float* inp, const float* wp, int B, int H, int W, int C, int OC,
                int K, int stride, int pad, float* scratch, bool accumulate);

// dweight [OC, K, K, C] (+)= the correlation of dout with inp. scratch: the padded sample as
// above, then OC x patch floats.
void DirectDweight(float* dweight, const float* dout, const float* inp, const ConvShape& s,
                   float* scratch, bool accumulate);

// wp [OC / 16][K][K][C][16] = weight [OC, K, K, C], the forward's lanes.
void PackForward(float* wp, const float* weight, const ConvShape& s);

// The input gradient of a stride-1 convolution is the convolution of dout (padded by K-1-pad)
// with the kernel turned 180 degrees and C, OC swapped: wp [C / 16][K][K][OC][16].
void PackBackwardData(float* wp, const float* weight, const ConvShape& s);

// Floats of scratch the direct kernels need for this shape: packed weights, then their own.
int64_t DirectScratchFloats(const ConvShape& s);

}  // namespace sweep::trainer::cpu
