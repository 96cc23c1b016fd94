// The kernel emulator's half: storage and the conversions the kernels use, with the device's
// rounding (to nearest, ties to even, overflow to infinity; a NaN becomes the canonical 0x7FFF).
// The conversion itself is the compiler's IEEE binary16 (_Float16), not code of ours.
#pragma once

#include <cstdint>

struct __half {
  unsigned short x;
};

__half __float2half(float f);

inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short x) { return {x}; }
float __half2float(__half h);
