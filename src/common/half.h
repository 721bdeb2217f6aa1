// Scalar conversions between float32 and the 16-bit float formats, rounding to nearest even.
// NaN stays NaN (quieted), infinities and subnormals convert exactly. float16 uses the F16C
// instructions when the including file is compiled with them; the vector kernels in
// reduce_kernels.cc convert whole registers and use these only as the reference behaviour.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace ronde {

inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline float halfToFloat(uint16_t half) {
#if defined(__F16C__)
  return _cvtsh_ss(half);
#else
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) {  // infinity, or NaN made quiet as vcvtph2ps does
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return bitsToFloat(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return bitsToFloat(sign | floatBits(magnitude));
  }
  return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
#endif
}

inline uint16_t floatToHalf(float value) {
#if defined(__F16C__)
  return _cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT);
#else
  const uint32_t bits = floatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): adding 0.5 makes the float unit in the last
    // place 2^-24, the half subnormal step, so the float adder rounds to nearest even for us.
    const float shifted = bitsToFloat(magnitude) + 0.5f;
    return static_cast<uint16_t>(sign | (floatBits(shifted) - 0x3f000000u));
  }
  const uint32_t odd = (magnitude >> 13) & 1u;
  magnitude += 0xc8000fffu + odd;  // rebias the exponent (127 -> 15) and round to nearest even
  return static_cast<uint16_t>(sign | (magnitude >> 13));
#endif
}

inline float bfloat16ToFloat(uint16_t value) {
  return bitsToFloat(static_cast<uint32_t>(value) << 16);
}

inline uint16_t floatToBfloat16(float value) {
  const uint32_t bits = floatBits(value);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

}  // namespace ronde
