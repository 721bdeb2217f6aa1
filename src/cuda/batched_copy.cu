// The device side of batched_copy.h: one kernel per (source, destination) element pair,
// covering a whole table of segments per launch. Each block copies kElementsPerBlock elements
// of one segment, found by binary search over the table's first_block column; each thread
// loads its kElementsPerThread elements before it stores any, so that many loads are in flight.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cuda/batched_copy.h"
#include "cuda/cuda_check.h"
#include "ronde/errors.h"

namespace ronde::cuda {
namespace {

// The table travels by value as the kernel's parameter (CUDA 12.1+ takes up to 32 KiB).
struct LaunchTable {
  LaunchSegment segments[kMaxSegmentsPerLaunch];
  uint32_t count;
};
static_assert(sizeof(LaunchTable) < 32000, "the table must fit the kernel parameter space");

template <class T>
struct RawCopy {
  using Src = T;
  using Dst = T;
  __device__ T operator()(T x) const { return x; }
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
  __device__ T operator()(T x) const {
    const double scaled = static_cast<double>(x) * scale;
    if (isnan(scaled)) return T{0};
    if (scaled >= kHigh) return kMax;
    if (scaled <= kLow) return kMin;
    return static_cast<T>(scaled);
  }
};

struct ScaleFloat32 {
  using Src = float;
  using Dst = float;
  float scale;
  __device__ float operator()(float x) const { return __fmul_rn(x, scale); }
};

struct ScaleFloat64 {
  using Src = double;
  using Dst = double;
  double scale;
  __device__ double operator()(double x) const { return __dmul_rn(x, scale); }
};

__device__ float widenHalf(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
__device__ float widenBfloat16(uint16_t bits) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
__device__ uint16_t narrowHalf(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ uint16_t narrowBfloat16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

// kHalf: float16 when true, bfloat16 when false.
template <bool kHalf>
struct Compress {
  using Src = float;
  using Dst = uint16_t;
  float scale;
  __device__ uint16_t operator()(float x) const {
    const float scaled = __fmul_rn(x, scale);
    return kHalf ? narrowHalf(scaled) : narrowBfloat16(scaled);
  }
};

template <bool kHalf>
struct Decompress {
  using Src = uint16_t;
  using Dst = float;
  float scale;
  __device__ float operator()(uint16_t x) const {
    return __fmul_rn(kHalf ? widenHalf(x) : widenBfloat16(x), scale);
  }
};

template <bool kHalf>
struct ScaleHalfWidth {
  using Src = uint16_t;
  using Dst = uint16_t;
  float scale;
  __device__ uint16_t operator()(uint16_t x) const {
    const float scaled = __fmul_rn(kHalf ? widenHalf(x) : widenBfloat16(x), scale);
    return kHalf ? narrowHalf(scaled) : narrowBfloat16(scaled);
  }
};

template <class Convert>
__global__ void __launch_bounds__(kThreadsPerBlock)
    batchedCopyKernel(const __grid_constant__ LaunchTable table, Convert convert) {
  using Src = typename Convert::Src;
  using Dst = typename Convert::Dst;
  const uint64_t block = blockIdx.x;
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
  const uint64_t base = (block - segment.first_block) * kElementsPerBlock + threadIdx.x;
  Src values[kElementsPerThread];
#pragma unroll
  for (uint32_t k = 0; k < kElementsPerThread; ++k) {
    const uint64_t i = base + uint64_t{k} * kThreadsPerBlock;
    if (i < segment.count) values[k] = src[i];
  }
#pragma unroll
  for (uint32_t k = 0; k < kElementsPerThread; ++k) {
    const uint64_t i = base + uint64_t{k} * kThreadsPerBlock;
    if (i < segment.count) dst[i] = convert(values[k]);
  }
}

template <class Convert>
void launchAll(const LaunchPlan& plan, Convert convert, cudaStream_t stream) {
  // Static: 24 KiB is too much for the caller's stack to hold comfortably on every call.
  thread_local LaunchTable table;
  for (const Launch& launch : plan.launches) {
    table.count = static_cast<uint32_t>(launch.segments.size());
    std::memcpy(table.segments, launch.segments.data(),
                launch.segments.size() * sizeof(LaunchSegment));
    if (launch.blocks > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      throw makeError(ErrorCode::kInvalidArgument, "batched copy of ", launch.blocks,
                      " blocks exceeds one launch's grid");
    }
    batchedCopyKernel<Convert>
        <<<static_cast<unsigned>(launch.blocks), kThreadsPerBlock, 0, stream>>>(table, convert);
    checkCuda(cudaGetLastError(), "launching the batched copy kernel");
  }
}

void launchRaw(const LaunchPlan& plan, cudaStream_t stream) {
  switch (plan.raw_unit_bytes) {
    case 16:
      return launchAll(plan, RawCopy<uint4>{}, stream);
    case 8:
      return launchAll(plan, RawCopy<uint64_t>{}, stream);
    case 4:
      return launchAll(plan, RawCopy<uint32_t>{}, stream);
    case 2:
      return launchAll(plan, RawCopy<uint16_t>{}, stream);
    default:
      return launchAll(plan, RawCopy<uint8_t>{}, stream);
  }
}

}  // namespace

bool deviceCopiesBuilt() { return true; }

void launchBatchedCopy(const std::vector<CopySegment>& segments, const CopyConversion& c,
                       void* stream_handle) {
  const LaunchPlan plan = planLaunches(segments, c);
  if (plan.launches.empty()) return;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  if (plan.raw_unit_bytes != 0) return launchRaw(plan, stream);
  const float scale32 = static_cast<float>(c.scale);
  const bool half = c.src_type == DataType::kFloat16 || c.dst_type == DataType::kFloat16;
  if (c.src_type != c.dst_type) {
    if (c.src_type == DataType::kFloat32) {
      return half ? launchAll(plan, Compress<true>{scale32}, stream)
                  : launchAll(plan, Compress<false>{scale32}, stream);
    }
    return half ? launchAll(plan, Decompress<true>{scale32}, stream)
                : launchAll(plan, Decompress<false>{scale32}, stream);
  }
  switch (c.src_type) {
    case DataType::kFloat16:
      return launchAll(plan, ScaleHalfWidth<true>{scale32}, stream);
    case DataType::kBFloat16:
      return launchAll(plan, ScaleHalfWidth<false>{scale32}, stream);
    case DataType::kFloat32:
      return launchAll(plan, ScaleFloat32{scale32}, stream);
    case DataType::kFloat64:
      return launchAll(plan, ScaleFloat64{c.scale}, stream);
    case DataType::kUInt8:
      return launchAll(plan, ScaleInteger<uint8_t>{c.scale}, stream);
    case DataType::kInt8:
      return launchAll(plan, ScaleInteger<int8_t>{c.scale}, stream);
    case DataType::kInt16:
      return launchAll(plan, ScaleInteger<int16_t>{c.scale}, stream);
    case DataType::kInt32:
      return launchAll(plan, ScaleInteger<int32_t>{c.scale}, stream);
    case DataType::kInt64:
      return launchAll(plan, ScaleInteger<int64_t>{c.scale}, stream);
    case DataType::kBool:
      break;
  }
  RONDE_CHECK(false, "conversion passed checkConversion but has no kernel");
}

}  // namespace ronde::cuda
