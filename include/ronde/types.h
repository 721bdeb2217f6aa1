// Element types and reduction operations understood by every collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ronde {

enum class DataType : uint8_t {
  kUInt8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kBool,
  kUInt16,  // last, so that the codes before it keep their values
};
constexpr int kNumDataTypes = 11;

size_t dataTypeSize(DataType type);
const char* dataTypeName(DataType type);
bool isFloatingPoint(DataType type);

enum class ReduceOp : uint8_t {
  kSum,
  kAverage,  // sum, then divided by the number of contributing ranks
  kMin,
  kMax,
  kProduct,
  // Adaptive summation (Horovod's Adasum): float types, a power-of-two number of ranks; run
  // by the Runtime (src/collectives/adasum.h), not by Communicator::allreduce.
  kAdasum,
};

const char* reduceOpName(ReduceOp op);

// Scale factors applied to every element before the reduction (prescale) and after it
// (postscale). Average multiplies the postscale by 1/size. Integer types round toward zero.
struct Scaling {
  double prescale = 1.0;
  double postscale = 1.0;
};

}  // namespace ronde
