// Batched copies between many tensors and one fusion buffer: Tensor Fusion on the device packs
// hundreds of small gradients into one buffer before the collective and unpacks them after.
// One kernel launch copies a whole table of (source, destination, count) segments, and each
// element is scaled (prescale before the reduction, postscale after) and cast (float32 to
// float16 or bfloat16 for compression, and back) on the way, so fusion costs one pass over the
// data instead of one copy per tensor plus one pass per scale or cast.
//
// The semantics are defined here and implemented twice: referenceBatchedCopy() on the host
// (every build; the CPU tests check it against hand-computed values) and launchBatchedCopy()
// on a CUDA stream (builds with CUDA; tests/gpu compares it with the reference bit for bit).
//
// Element conversion, dst[i] = To(scale * From(src[i])):
//   - same type, scale 1: the bytes are copied (any type, bool included);
//   - same type, scale s: float32 and the 16-bit floats multiply in float32 by float(s) and
//     round to nearest even; float64 multiplies in double; integers multiply in double,
//     truncate toward zero and saturate at the type's range (as ronde's host reduction
//     kernels do); bool cannot be scaled;
//   - float32 -> float16 / bfloat16: multiply in float32, then round to nearest even;
//   - float16 / bfloat16 -> float32: widen exactly, then multiply in float32.
// Segments must not overlap one another's destinations; a source may not alias another
// segment's destination.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ronde/types.h"

namespace ronde::cuda {

struct CopySegment {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t count = 0;  // elements of the conversion's source type
};

struct CopyConversion {
  DataType src_type = DataType::kFloat32;
  DataType dst_type = DataType::kFloat32;
  double scale = 1.0;
};

// Error(kInvalidArgument) naming the types or the scale when the conversion is not one of the
// above.
void checkConversion(const CopyConversion& conversion);

// The host reference: performs every segment with the semantics above.
void referenceBatchedCopy(const std::vector<CopySegment>& segments,
                          const CopyConversion& conversion);

// Where each tensor sits in a fusion buffer of `type`: offsets aligned so that every tensor
// starts on a 256-byte boundary (the device copies then use full-width memory transactions).
struct FusionLayout {
  std::vector<uint64_t> offsets;  // bytes from the buffer's start, one per tensor
  uint64_t bytes = 0;             // the buffer size the tensors need
};
inline constexpr uint64_t kFusionAlignment = 256;
FusionLayout layoutFusion(const std::vector<uint64_t>& counts, DataType buffer_type);

// The segments that pack `tensors` (counts[i] elements each) into `buffer` at `layout`, and
// that unpack the buffer back into them.
std::vector<CopySegment> packSegments(const std::vector<const void*>& tensors,
                                      const std::vector<uint64_t>& counts, void* buffer,
                                      const FusionLayout& layout);
std::vector<CopySegment> unpackSegments(const void* buffer, const std::vector<void*>& tensors,
                                        const std::vector<uint64_t>& counts,
                                        const FusionLayout& layout, DataType buffer_type);

// How the device kernel covers a table: blocks of kElementsPerBlock elements, at most
// kMaxSegmentsPerLaunch segments per launch (the table travels as the kernel's parameter, so
// no host-to-device copy or synchronisation precedes a launch).
inline constexpr uint32_t kThreadsPerBlock = 256;
inline constexpr uint32_t kElementsPerThread = 8;
inline constexpr uint64_t kElementsPerBlock = kThreadsPerBlock * kElementsPerThread;
inline constexpr size_t kMaxSegmentsPerLaunch = 512;

struct LaunchSegment {
  const void* src;
  void* dst;
  uint64_t count;        // units (elements, or wider words for a raw copy)
  uint64_t first_block;  // the launch's first block that works on this segment
};

struct Launch {
  std::vector<LaunchSegment> segments;  // non-empty segments only, at most kMaxSegmentsPerLaunch
  uint64_t blocks = 0;
};

struct LaunchPlan {
  // Bytes per unit of a raw copy (same type, scale 1): the widest of 16, 8, 4, 2, 1 that
  // divides every address and byte count of the table; 0 for a converting copy (units are
  // elements of the source type).
  uint32_t raw_unit_bytes = 0;
  std::vector<Launch> launches;
};
LaunchPlan planLaunches(const std::vector<CopySegment>& segments, const CopyConversion& conversion);

// True when this build has the CUDA kernels.
bool deviceCopiesBuilt();

// Enqueues the copies on `stream` (a cudaStream_t; null: the legacy default stream) and
// returns at once. Error(kConfig) in a build without CUDA; Error(kIo) naming the CUDA error
// when a launch fails. Device pointers (or managed / host-registered memory) only.
void launchBatchedCopy(const std::vector<CopySegment>& segments, const CopyConversion& conversion,
                       void* stream);

}  // namespace ronde::cuda
