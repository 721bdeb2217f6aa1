// The body of the batched copy kernel (batched_copy.h), written once for two compilers: nvcc
// builds it into the kernel of batched_copy.cu, and a host compiler builds it into the
// emulated GPU of tests/emulated_gpu, which runs every block and thread of a launch in turn.
// So the emulated build executes the kernel's own indexing, bounds and conversions (with CUDA's
// host implementations of the float16/bfloat16 casts), and tests/gpu/batched_copy_gpu_test
// holds them to the independent host reference (batched_copy_reference.cc) without a GPU.
// There is no shared memory and no synchronisation between threads, so running the threads
// one after another is the kernel's semantics: segments never share a destination.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "cuda/batched_copy.h"
#include "ronde/errors.h"

#if defined(__CUDACC__)
#define RONDE_HOST_DEVICE __host__ __device__
#else
#define RONDE_HOST_DEVICE
#endif
// The device pass unrolls the per-thread loops; host compilers (the emulation, and nvcc's host
// pass over the same function) do not know the pragma.
#if defined(__CUDA_ARCH__)
#define RONDE_UNROLL _Pragma("unroll")
#else
#define RONDE_UNROLL
#endif

namespace ronde::cuda::kernel {

// One launch's table; on the device it travels by value as the kernel's parameter (CUDA 12.1+
// takes up to 32 KiB), so no copy to the device or synchronisation precedes a launch.
struct LaunchTable {
  LaunchSegment segments[kMaxSegmentsPerLaunch];
  uint32_t count;
};
static_assert(sizeof(LaunchTable) < 32000, "the table must fit the kernel parameter space");

// IEEE products rounded to nearest even: the device's intrinsics say so explicitly (nvcc must
// not contract them into a neighbouring add), the host's SSE multiply is that already.
RONDE_HOST_DEVICE inline float multiply(float x, float scale) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, scale);
#else
  return x * scale;
#endif
}
RONDE_HOST_DEVICE inline double multiply(double x, double scale) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(x, scale);
#else
  return x * scale;
#endif
}

template <class T>
struct RawCopy {
  using Src = T;
  using Dst = T;
  RONDE_HOST_DEVICE T operator()(T x) const { return x; }
};

template <class T>
struct ScaleInteger {
  using Src = T;
  using Dst = T;
  // Constants, since std::numeric_limits is host code; the 64-bit limits round up to 2^63 and
  // 2^64, which no smaller value reaches.
  static constexpr double kHigh = static_cast<double>(std::numeric_limits<T>::max());
  static constexpr double kLow = static_cast<double>(std::numeric_limits<T>::min());
  static constexpr T kMax = std::numeric_limits<T>::max();
  static constexpr T kMin = std::numeric_limits<T>::min();
  double scale;
  RONDE_HOST_DEVICE T operator()(T x) const {
    const double scaled = multiply(static_cast<double>(x), scale);
    if (scaled != scaled) return T{0};  // NaN (a NaN scale)
    if (scaled >= kHigh) return kMax;
    if (scaled <= kLow) return kMin;
    return static_cast<T>(scaled);
  }
};

struct ScaleFloat32 {
  using Src = float;
  using Dst = float;
  float scale;
  RONDE_HOST_DEVICE float operator()(float x) const { return multiply(x, scale); }
};

struct ScaleFloat64 {
  using Src = double;
  using Dst = double;
  double scale;
  RONDE_HOST_DEVICE double operator()(double x) const { return multiply(x, scale); }
};

RONDE_HOST_DEVICE inline float widenHalf(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}
RONDE_HOST_DEVICE inline float widenBfloat16(uint16_t bits) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
RONDE_HOST_DEVICE inline uint16_t narrowHalf(float x) {
  return __half_as_ushort(__float2half_rn(x));
}
RONDE_HOST_DEVICE inline uint16_t narrowBfloat16(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// kHalf: float16 when true, bfloat16 when false.
template <bool kHalf>
struct Compress {
  using Src = float;
  using Dst = uint16_t;
  float scale;
  RONDE_HOST_DEVICE uint16_t operator()(float x) const {
    const float scaled = multiply(x, scale);
    return kHalf ? narrowHalf(scaled) : narrowBfloat16(scaled);
  }
};

template <bool kHalf>
struct Decompress {
  using Src = uint16_t;
  using Dst = float;
  float scale;
  RONDE_HOST_DEVICE float operator()(uint16_t x) const {
    return multiply(kHalf ? widenHalf(x) : widenBfloat16(x), scale);
  }
};

template <bool kHalf>
struct ScaleHalfWidth {
  using Src = uint16_t;
  using Dst = uint16_t;
  float scale;
  RONDE_HOST_DEVICE uint16_t operator()(uint16_t x) const {
    const float scaled = multiply(kHalf ? widenHalf(x) : widenBfloat16(x), scale);
    return kHalf ? narrowHalf(scaled) : narrowBfloat16(scaled);
  }
};

// What thread `thread` of block `block` copies: kElementsPerThread elements of the segment
// that block works on, all loaded before any is stored, so that many loads are in flight.
template <class Convert>
RONDE_HOST_DEVICE inline void copyThread(const LaunchTable& table, const Convert& convert,
                                         uint64_t block, uint32_t thread) {
  using Src = typename Convert::Src;
  using Dst = typename Convert::Dst;
  uint32_t lo = 0, hi = table.count - 1;
  while (lo < hi) {  // the last segment whose first block is at or before this one
    const uint32_t mid = (lo + hi + 1) / 2;
    if (table.segments[mid].first_block <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const LaunchSegment& segment = table.segments[lo];
  const Src* __restrict__ src = static_cast<const Src*>(segment.src);
  Dst* __restrict__ dst = static_cast<Dst*>(segment.dst);
  const uint64_t base = (block - segment.first_block) * kElementsPerBlock + thread;
  Src values[kElementsPerThread];
  RONDE_UNROLL
  for (uint32_t k = 0; k < kElementsPerThread; ++k) {
    const uint64_t i = base + uint64_t{k} * kThreadsPerBlock;
    if (i < segment.count) values[k] = src[i];
  }
  RONDE_UNROLL
  for (uint32_t k = 0; k < kElementsPerThread; ++k) {
    const uint64_t i = base + uint64_t{k} * kThreadsPerBlock;
    if (i < segment.count) dst[i] = convert(values[k]);
  }
}

// Calls launch(plan, convert) with the converter `plan` and `c` call for (host code): the raw
// copy of the plan's unit, or the scale / cast of c's types.
template <class LaunchAll>
void dispatch(const LaunchPlan& plan, const CopyConversion& c, LaunchAll&& launch) {
  switch (plan.raw_unit_bytes) {
    case 16:
      return launch(plan, RawCopy<uint4>{});
    case 8:
      return launch(plan, RawCopy<uint64_t>{});
    case 4:
      return launch(plan, RawCopy<uint32_t>{});
    case 2:
      return launch(plan, RawCopy<uint16_t>{});
    case 1:
      return launch(plan, RawCopy<uint8_t>{});
    default:  // 0: a converting copy
      break;
  }
  const float scale32 = static_cast<float>(c.scale);
  const bool half = c.src_type == DataType::kFloat16 || c.dst_type == DataType::kFloat16;
  if (c.src_type != c.dst_type) {
    if (c.src_type == DataType::kFloat32) {
      return half ? launch(plan, Compress<true>{scale32}) : launch(plan, Compress<false>{scale32});
    }
    return half ? launch(plan, Decompress<true>{scale32})
                : launch(plan, Decompress<false>{scale32});
  }
  switch (c.src_type) {
    case DataType::kFloat16:
      return launch(plan, ScaleHalfWidth<true>{scale32});
    case DataType::kBFloat16:
      return launch(plan, ScaleHalfWidth<false>{scale32});
    case DataType::kFloat32:
      return launch(plan, ScaleFloat32{scale32});
    case DataType::kFloat64:
      return launch(plan, ScaleFloat64{c.scale});
    case DataType::kUInt8:
      return launch(plan, ScaleInteger<uint8_t>{c.scale});
    case DataType::kInt8:
      return launch(plan, ScaleInteger<int8_t>{c.scale});
    case DataType::kInt16:
      return launch(plan, ScaleInteger<int16_t>{c.scale});
    case DataType::kUInt16:
      return launch(plan, ScaleInteger<uint16_t>{c.scale});
    case DataType::kInt32:
      return launch(plan, ScaleInteger<int32_t>{c.scale});
    case DataType::kInt64:
      return launch(plan, ScaleInteger<int64_t>{c.scale});
    case DataType::kBool:
      break;
  }
  RONDE_CHECK(false, "conversion passed checkConversion but has no kernel");
}

// Copies `launch`'s segments into `table`; Error(kInvalidArgument) for a grid larger than one
// launch may have.
inline void fillTable(const Launch& launch, LaunchTable& table) {
  if (launch.blocks > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    throw makeError(ErrorCode::kInvalidArgument, "batched copy of ", launch.blocks,
                    " blocks exceeds one launch's grid");
  }
  table.count = static_cast<uint32_t>(launch.segments.size());
  for (size_t i = 0; i < launch.segments.size(); ++i) table.segments[i] = launch.segments[i];
}

}  // namespace ronde::cuda::kernel
