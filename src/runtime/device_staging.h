// Host staging of collectives on device buffers, chunk by chunk: every chunk's device-to-host
// copy is issued at once, then for each chunk in turn the host waits for its copy, runs the
// collective on it and issues its host-to-device copy. The copies of later chunks, the
// collective on this one and the copies back of earlier ones overlap (on a GPU: two copy
// engines and the host). Chunks are whole elements of about `chunk_bytes`, the same on every
// rank, so every rank runs the same collectives in the same order.
//
// Written against DeviceOps alone: the CPU tests run it on host memory
// (device_host_memory.h), the GPU check on CUDA. Background thread only.
#pragma once

#include <functional>

#include "runtime/device_ops.h"

namespace ronde::runtime {

struct StagingContext {
  DeviceOps& ops;
  size_t chunk_bytes;
  Deadline deadline;  // for the waits on copies
};

// The collective on one staged chunk: `count` elements at `host`, in place.
using ChunkCollective = std::function<void(unsigned char* host, size_t count)>;

// Stages `count` elements of `element` bytes from device `in` through the pinned host buffer to
// device `out`, running `collective` on each chunk between the copies. `in` null: the chunk's
// host bytes are zeros (a rank that contributes nothing) or, with zero_missing false, left as
// they are (a broadcast's receivers); `out` null: nothing is copied back. `chunk_bytes` 0: one
// chunk (collectives that need the whole buffer at once, e.g. Adasum).
void runStagedChunks(StagingContext& context, const void* in, void* out, size_t count,
                     size_t element, bool zero_missing, const ChunkCollective& collective);

// Whole buffers, in chunked copies: device to host (returns once all have landed), and host
// to device (issued, finished by DeviceOps::finish).
void stageToHost(StagingContext& context, unsigned char* host, const void* device, size_t bytes);
void stageToDevice(StagingContext& context, void* device, const unsigned char* host, size_t bytes);

}  // namespace ronde::runtime
