// The kernel emulator's bfloat16: storage and the conversions the kernels use, with the
// device's rounding (to nearest, ties to even; a NaN becomes the canonical 0x7FFF); widening is
// exact.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short x;
};

inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return {0x7FFF};
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return {static_cast<unsigned short>(bits >> 16)};
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t bits = uint32_t{h.x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
