// Independent reference values for collective tests: inputs are small integers so that every
// dtype holds them exactly, and the expected result is computed in double with plain loops,
// sharing no code with ronde's kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ronde/types.h"

namespace ronde::testing {

// Input value of element i on rank r, in [-3, 3] (unsigned and bool: [0, 6] / {0, 1}).
inline double inputValue(DataType type, int rank, size_t i, int salt = 0) {
  long v = static_cast<long>((static_cast<size_t>(rank) * 5 + i * 3 + static_cast<size_t>(salt) * 2) % 7);
  if (type == DataType::kBool) return v % 3 == 0 ? 1 : 0;
  if (type == DataType::kUInt8 || type == DataType::kUInt16) return static_cast<double>(v);
  return static_cast<double>(v - 3);
}

// Stores a value in a buffer of the given dtype (exact for the values above).
inline void storeValue(DataType type, void* base, size_t i, double v) {
  switch (type) {
    case DataType::kUInt8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(static_cast<long>(v)); break;
    case DataType::kInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case DataType::kInt16: static_cast<int16_t*>(base)[i] = static_cast<int16_t>(v); break;
    case DataType::kUInt16: static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(static_cast<long>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<_Float16*>(base)[i] = static_cast<_Float16>(v); break;
    case DataType::kBFloat16: {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(bits >> 16);  // exact for these values
      break;
    }
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v; break;
    case DataType::kBool: static_cast<uint8_t*>(base)[i] = v != 0 ? 1 : 0; break;
  }
}

inline double loadValue(DataType type, const void* base, size_t i) {
  switch (type) {
    case DataType::kUInt8: return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt8: return static_cast<const int8_t*>(base)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(base)[i];
    case DataType::kUInt16: return static_cast<const uint16_t*>(base)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kFloat16: return static_cast<double>(static_cast<const _Float16*>(base)[i]);
    case DataType::kBFloat16: {
      uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(base)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
    case DataType::kBool: return static_cast<const uint8_t*>(base)[i] != 0 ? 1 : 0;
  }
  return 0;
}

inline size_t sizeOf(DataType type) {
  switch (type) {
    case DataType::kUInt8: case DataType::kInt8: case DataType::kBool: return 1;
    case DataType::kInt16: case DataType::kUInt16: case DataType::kFloat16: case DataType::kBFloat16: return 2;
    case DataType::kInt32: case DataType::kFloat32: return 4;
    case DataType::kInt64: case DataType::kFloat64: return 8;
  }
  return 0;
}

inline bool isFloat(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBFloat16 || type == DataType::kFloat32 ||
         type == DataType::kFloat64;
}

// The expected reduction over ranks 0..size-1 of element i.
inline double expectedReduction(DataType type, ReduceOp op, int size, size_t i, int salt = 0) {
  double acc = inputValue(type, 0, i, salt);
  for (int r = 1; r < size; ++r) {
    double v = inputValue(type, r, i, salt);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
      case ReduceOp::kAdasum: break;  // not elementwise: adasum_test has its own reference
    }
  }
  if (type == DataType::kBool) {
    if (op == ReduceOp::kSum) return acc != 0 ? 1 : 0;            // logical or
    if (op == ReduceOp::kProduct) return acc != 0 ? 1 : 0;        // logical and
  }
  if (op == ReduceOp::kAverage) acc /= size;
  return acc;
}

inline std::vector<DataType> allDataTypes() {
  return {DataType::kUInt8, DataType::kInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64,
          DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
          DataType::kBool, DataType::kUInt16};
}

// What ronde's allreduce gives for (type, op) over `size` ranks with the scales: floats exactly
// (the values are small), integers truncated toward zero after scaling (as copyScaled does),
// uint8 wrapping (a product of 4 ranks' values up to 6 does), as C++ and NCCL do. The other
// integer types hold every result exactly up to 4 ranks.
inline double expectedAllreduce(DataType type, ReduceOp op, int size, size_t i, int salt,
                                double pre, double post) {
  double v = expectedReduction(type, op, size, i, salt);
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) v *= pre * post;
  if (!isFloat(type) && type != DataType::kBool) v = std::trunc(v);
  if (type == DataType::kUInt8) v = std::fmod(v, 256.0);
  return v;
}

inline std::vector<ReduceOp> allReduceOps() {
  return {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
}

}  // namespace ronde::testing
