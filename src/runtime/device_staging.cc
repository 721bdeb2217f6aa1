#include "runtime/device_staging.h"

#include <algorithm>
#include <cstring>

namespace ronde::runtime {
namespace {

size_t chunkElements(const StagingContext& context, size_t count, size_t element) {
  if (context.chunk_bytes == 0) return std::max<size_t>(count, 1);
  return std::max<size_t>(context.chunk_bytes / element, 1);
}

}  // namespace

void runStagedChunks(StagingContext& context, const void* in, void* out, size_t count,
                     size_t element, bool zero_missing, const ChunkCollective& collective) {
  if (count == 0) return;  // every rank has the same count: all skip alike
  const size_t chunk = chunkElements(context, count, element);
  unsigned char* host = context.ops.hostBuffer(count * element);
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  std::vector<uint64_t> tickets;
  for (size_t offset = 0; offset < count; offset += chunk) {
    size_t bytes = std::min(chunk, count - offset) * element;
    if (src != nullptr) {
      tickets.push_back(context.ops.toHost(host + offset * element, src + offset * element, bytes));
    } else if (zero_missing) {
      std::memset(host + offset * element, 0, bytes);
    }
  }
  size_t index = 0;
  for (size_t offset = 0; offset < count; offset += chunk, ++index) {
    size_t n = std::min(chunk, count - offset);
    if (src != nullptr) context.ops.waitToHost(tickets[index], context.deadline);
    collective(host + offset * element, n);
    if (dst != nullptr)
      context.ops.toDevice(dst + offset * element, host + offset * element, n * element);
  }
}

void stageToHost(StagingContext& context, unsigned char* host, const void* device, size_t bytes) {
  if (bytes == 0) return;
  const size_t chunk = context.chunk_bytes == 0 ? bytes : context.chunk_bytes;
  const auto* src = static_cast<const unsigned char*>(device);
  uint64_t last = 0;
  for (size_t offset = 0; offset < bytes; offset += chunk)
    last = context.ops.toHost(host + offset, src + offset, std::min(chunk, bytes - offset));
  context.ops.waitToHost(last, context.deadline);  // in order: the last one landed, all did
}

void stageToDevice(StagingContext& context, void* device, const unsigned char* host, size_t bytes) {
  const size_t chunk = context.chunk_bytes == 0 ? bytes : context.chunk_bytes;
  auto* dst = static_cast<unsigned char*>(device);
  for (size_t offset = 0; offset < bytes; offset += chunk)
    context.ops.toDevice(dst + offset, host + offset, std::min(chunk, bytes - offset));
}

}  // namespace ronde::runtime
