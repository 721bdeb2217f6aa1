// The host side of batched_copy.h: its reference semantics, the fusion layout and the launch
// plan. No CUDA header: this file is part of every build.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/half.h"
#include "cuda/batched_copy.h"
#include "ronde/errors.h"

namespace ronde::cuda {
namespace {

bool isHalfWidthFloat(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBFloat16;
}

template <class T>
T saturatingScale(T value, double scale) {
  const double scaled = static_cast<double>(value) * scale;
  if (std::isnan(scaled)) return T{0};
  // Compared as doubles: the limits of the 64-bit types round up to 2^63 and 2^64, which no
  // value below them reaches.
  if (scaled >= static_cast<double>(std::numeric_limits<T>::max())) {
    return std::numeric_limits<T>::max();
  }
  if (scaled <= static_cast<double>(std::numeric_limits<T>::min())) {
    return std::numeric_limits<T>::min();
  }
  return static_cast<T>(scaled);
}

template <class T>
void scaleIntegers(const void* src, void* dst, uint64_t count, double scale) {
  const T* in = static_cast<const T*>(src);
  T* out = static_cast<T*>(dst);
  for (uint64_t i = 0; i < count; ++i) out[i] = saturatingScale(in[i], scale);
}

float widen(uint16_t bits, DataType type) {
  return type == DataType::kFloat16 ? halfToFloat(bits) : bfloat16ToFloat(bits);
}

uint16_t narrow(float value, DataType type) {
  return type == DataType::kFloat16 ? floatToHalf(value) : floatToBfloat16(value);
}

void convertSegment(const CopySegment& s, const CopyConversion& c) {
  const DataType from = c.src_type, to = c.dst_type;
  const float scale32 = static_cast<float>(c.scale);
  if (from == to && c.scale == 1.0) {
    std::memmove(s.dst, s.src, s.count * dataTypeSize(from));
    return;
  }
  if (from == DataType::kFloat32 && isHalfWidthFloat(to)) {
    const float* in = static_cast<const float*>(s.src);
    uint16_t* out = static_cast<uint16_t*>(s.dst);
    for (uint64_t i = 0; i < s.count; ++i) out[i] = narrow(in[i] * scale32, to);
    return;
  }
  if (isHalfWidthFloat(from) && to == DataType::kFloat32) {
    const uint16_t* in = static_cast<const uint16_t*>(s.src);
    float* out = static_cast<float*>(s.dst);
    for (uint64_t i = 0; i < s.count; ++i) out[i] = widen(in[i], from) * scale32;
    return;
  }
  switch (from) {  // same type, scaled
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const uint16_t* in = static_cast<const uint16_t*>(s.src);
      uint16_t* out = static_cast<uint16_t*>(s.dst);
      for (uint64_t i = 0; i < s.count; ++i) out[i] = narrow(widen(in[i], from) * scale32, from);
      return;
    }
    case DataType::kFloat32: {
      const float* in = static_cast<const float*>(s.src);
      float* out = static_cast<float*>(s.dst);
      for (uint64_t i = 0; i < s.count; ++i) out[i] = in[i] * scale32;
      return;
    }
    case DataType::kFloat64: {
      const double* in = static_cast<const double*>(s.src);
      double* out = static_cast<double*>(s.dst);
      for (uint64_t i = 0; i < s.count; ++i) out[i] = in[i] * c.scale;
      return;
    }
    case DataType::kUInt8:
      return scaleIntegers<uint8_t>(s.src, s.dst, s.count, c.scale);
    case DataType::kInt8:
      return scaleIntegers<int8_t>(s.src, s.dst, s.count, c.scale);
    case DataType::kInt16:
      return scaleIntegers<int16_t>(s.src, s.dst, s.count, c.scale);
    case DataType::kUInt16:
      return scaleIntegers<uint16_t>(s.src, s.dst, s.count, c.scale);
    case DataType::kInt32:
      return scaleIntegers<int32_t>(s.src, s.dst, s.count, c.scale);
    case DataType::kInt64:
      return scaleIntegers<int64_t>(s.src, s.dst, s.count, c.scale);
    case DataType::kBool:
      break;
  }
  RONDE_CHECK(false, "conversion passed checkConversion but has no reference");
}

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

void checkConversion(const CopyConversion& c) {
  if (static_cast<int>(c.src_type) >= kNumDataTypes ||
      static_cast<int>(c.dst_type) >= kNumDataTypes) {
    throw makeError(ErrorCode::kInvalidArgument, "batched copy: unknown data type");
  }
  if (!std::isfinite(c.scale)) {
    throw makeError(ErrorCode::kInvalidArgument, "batched copy: the scale must be finite, not ",
                    c.scale);
  }
  if (c.src_type == c.dst_type) {
    if (c.src_type == DataType::kBool && c.scale != 1.0) {
      throw makeError(ErrorCode::kInvalidArgument, "batched copy: bool cannot be scaled (scale ",
                      c.scale, ")");
    }
    return;
  }
  const bool compress = c.src_type == DataType::kFloat32 && isHalfWidthFloat(c.dst_type);
  const bool decompress = isHalfWidthFloat(c.src_type) && c.dst_type == DataType::kFloat32;
  if (!compress && !decompress) {
    throw makeError(ErrorCode::kInvalidArgument, "batched copy: no cast from ",
                    dataTypeName(c.src_type), " to ", dataTypeName(c.dst_type),
                    " (only float32 <-> float16 or bfloat16)");
  }
}

void referenceBatchedCopy(const std::vector<CopySegment>& segments,
                          const CopyConversion& conversion) {
  checkConversion(conversion);
  for (const CopySegment& segment : segments) {
    if (segment.count == 0) continue;
    convertSegment(segment, conversion);
  }
}

FusionLayout layoutFusion(const std::vector<uint64_t>& counts, DataType buffer_type) {
  FusionLayout layout;
  const uint64_t element = dataTypeSize(buffer_type);
  for (uint64_t count : counts) {
    layout.bytes = alignUp(layout.bytes, kFusionAlignment);
    layout.offsets.push_back(layout.bytes);
    layout.bytes += count * element;
  }
  return layout;
}

std::vector<CopySegment> packSegments(const std::vector<const void*>& tensors,
                                      const std::vector<uint64_t>& counts, void* buffer,
                                      const FusionLayout& layout) {
  if (tensors.size() != counts.size() || counts.size() != layout.offsets.size()) {
    throw makeError(ErrorCode::kInvalidArgument, "pack: ", tensors.size(), " tensors, ",
                    counts.size(), " counts and ", layout.offsets.size(), " offsets");
  }
  std::vector<CopySegment> segments(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    segments[i] = {tensors[i], static_cast<char*>(buffer) + layout.offsets[i], counts[i]};
  }
  return segments;
}

std::vector<CopySegment> unpackSegments(const void* buffer, const std::vector<void*>& tensors,
                                        const std::vector<uint64_t>& counts,
                                        const FusionLayout& layout, DataType buffer_type) {
  if (tensors.size() != counts.size() || counts.size() != layout.offsets.size()) {
    throw makeError(ErrorCode::kInvalidArgument, "unpack: ", tensors.size(), " tensors, ",
                    counts.size(), " counts and ", layout.offsets.size(), " offsets");
  }
  (void)buffer_type;  // the offsets are in bytes already
  std::vector<CopySegment> segments(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    segments[i] = {static_cast<const char*>(buffer) + layout.offsets[i], tensors[i], counts[i]};
  }
  return segments;
}

LaunchPlan planLaunches(const std::vector<CopySegment>& segments,
                        const CopyConversion& conversion) {
  checkConversion(conversion);
  LaunchPlan plan;
  const bool raw = conversion.src_type == conversion.dst_type && conversion.scale == 1.0;
  const uint64_t element = dataTypeSize(conversion.src_type);
  if (raw) {
    // The widest word that every address and length allows: full 16-byte transactions for
    // the usual aligned tensors, whatever their element type.
    uint64_t unit = 16;
    for (const CopySegment& s : segments) {
      if (s.count == 0) continue;
      const uint64_t bits = reinterpret_cast<uintptr_t>(s.src) |
                            reinterpret_cast<uintptr_t>(s.dst) | (s.count * element);
      while (unit > 1 && (bits % unit) != 0) unit /= 2;
    }
    plan.raw_unit_bytes = static_cast<uint32_t>(unit);
  }
  Launch current;
  for (const CopySegment& s : segments) {
    if (s.count == 0) continue;
    const uint64_t units = raw ? s.count * element / plan.raw_unit_bytes : s.count;
    if (current.segments.size() == kMaxSegmentsPerLaunch) {
      plan.launches.push_back(std::move(current));
      current = Launch{};
    }
    current.segments.push_back({s.src, s.dst, units, current.blocks});
    current.blocks += (units + kElementsPerBlock - 1) / kElementsPerBlock;
  }
  if (!current.segments.empty()) plan.launches.push_back(std::move(current));
  return plan;
}

#ifndef RONDE_HAVE_CUDA
bool deviceCopiesBuilt() { return false; }

void launchBatchedCopy(const std::vector<CopySegment>&, const CopyConversion&, void*) {
  throw makeError(ErrorCode::kConfig,
                  "this build of ronde has no CUDA kernels: rebuild where CMake finds the CUDA "
                  "toolkit (-DRONDE_WITH_CUDA=ON)");
}
#endif

}  // namespace ronde::cuda
