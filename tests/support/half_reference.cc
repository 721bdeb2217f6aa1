#include "support/half_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ronde::testing {
namespace {

// Rounds to nearest even among the positive finite patterns [0, max_finite], which increase
// with their value; `beyond` is where the next pattern (infinity) would sit.
uint16_t roundByTable(double value, const std::vector<double>& values, uint16_t max_finite,
                      double beyond) {
  const uint16_t infinity = max_finite + 1;
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return infinity | 0x40;  // any NaN; callers compare NaN-ness
  const double magnitude = std::fabs(value);
  // The largest pattern whose value is <= magnitude.
  const auto end = values.begin() + max_finite + 1;
  const uint16_t lo = static_cast<uint16_t>(std::upper_bound(values.begin(), end, magnitude) -
                                            values.begin() - 1);
  const double below = values[lo];
  const double above = lo == max_finite ? beyond : values[lo + 1];
  uint16_t pick = lo;
  if (magnitude - below > above - magnitude) pick = lo + 1;
  if (magnitude - below == above - magnitude && (lo & 1)) pick = lo + 1;
  return sign | pick;
}

std::vector<double> tableOf(double (*decode)(uint16_t)) {
  std::vector<double> values(65536);
  for (uint32_t i = 0; i < 65536; ++i) values[i] = decode(static_cast<uint16_t>(i));
  return values;
}

}  // namespace

double decodeHalf(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double decodeBfloat16(uint16_t b) {
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  const int exponent = (b >> 7) & 0xff;
  const int mantissa = b & 0x7f;
  if (exponent == 0xff) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

uint16_t roundHalf(double v) {
  static const std::vector<double> values = tableOf(decodeHalf);
  return roundByTable(v, values, 0x7bff, 65536.0);
}

uint16_t roundBfloat16(double v) {
  static const std::vector<double> values = tableOf(decodeBfloat16);
  return roundByTable(v, values, 0x7f7f, std::ldexp(1.0, 128));
}

bool isHalfNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool isBfloat16Nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f); }

}  // namespace ronde::testing
