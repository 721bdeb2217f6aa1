// An independent reference for 16-bit floats (IEEE half and bfloat16): values decoded bit by
// bit and rounding by searching the table of representable values, so that it shares no
// conversion code with the library (src/common/half.h) it checks.
#pragma once

#include <cstdint>

namespace ronde::testing {

double decodeHalf(uint16_t h);
double decodeBfloat16(uint16_t b);
// Round to nearest even; NaN gives some NaN pattern (compare NaN-ness, not bits).
uint16_t roundHalf(double v);
uint16_t roundBfloat16(double v);
bool isHalfNan(uint16_t h);
bool isBfloat16Nan(uint16_t b);

}  // namespace ronde::testing
