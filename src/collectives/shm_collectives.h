// Collective algorithms over the shared-memory arena of one host, one per file. Every rank
// copies its contribution into its own slot once, and reads its peers' slots directly:
// one copy in, one copy out, with the reduction split between the ranks. Large buffers go
// through in chunks that stay in cache, with double-buffered slots so that fast ranks run
// ahead into the next chunk while slow ones finish the previous.
//
// Each algorithm takes at least one step even for empty buffers, publishes its descriptor
// before its first arrive and checks all ranks' descriptors after its first wait, so every
// rank reports the same mismatch.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/block_layout.h"
#include "collectives/op_descriptor.h"
#include "transport/shm/shm_arena.h"

namespace ronde {

struct ShmOp {
  ShmArena* arena;
  ShmWait wait;
  OpDescriptor descriptor;
  size_t single_step_bytes = 64 * 1024;  // allreduce at or below: every rank reduces all
  // Bytes per rank per step, at most the arena's slot (0: the whole slot). Every local rank
  // must use the same value in one collective; it may change between collectives, since the
  // step protocol does not depend on it.
  size_t chunk_bytes = 0;
  // Large unscaled allreduces read peers' buffers straight (shm_direct_allreduce.cc): set
  // only when shmProbeDirectRead found it works on every local rank.
  bool direct_read = false;
  // shmDirectScratchBytes(local size) of private memory the direct allreduce reads peers'
  // pieces into, kept by the caller across calls; null: it allocates its own per call.
  char* direct_blocks = nullptr;

  size_t chunkBytes() const { return chunk_bytes != 0 ? chunk_bytes : arena->chunkBytes(); }
};

void shmAllreduce(const ShmOp& op, const void* in, void* out, size_t count, DataType type,
                  ReduceOp reduce, double prescale, double postscale);
// Rank r receives block r (counts[r] elements) of the reduction of `in`.
void shmReducescatter(const ShmOp& op, const void* in, void* out, const std::vector<size_t>& counts,
                      DataType type, ReduceOp reduce, double prescale, double postscale);
// The same where local rank j's share is `per_rank` blocks that may lie apart in `in`:
// segments[j * per_rank, (j + 1) * per_rank), in elements of `in`, the same list on every
// local rank. This rank's `out` receives the reduction of its blocks, one after the other.
void shmReducescatterSegments(const ShmOp& op, const void* in, void* out,
                              std::span<const Segment> segments, size_t per_rank, DataType type,
                              ReduceOp reduce, double prescale, double postscale);
// `in` may alias the rank's own block of `out`.
void shmAllgatherv(const ShmOp& op, const void* in, void* out, const std::vector<size_t>& counts,
                   DataType type);
// The same where each local rank contributes `per_rank` blocks that may lie apart in `out`:
// local rank j's are segments[j * per_rank, (j + 1) * per_rank), in elements of `out`, and
// every local rank passes the same list. This rank's blocks are read from `mine`, their
// concatenation, or, where `mine` is null, from their places in `out`, already filled.
void shmAllgatherSegments(const ShmOp& op, const void* mine, void* out,
                          std::span<const Segment> segments, size_t per_rank, DataType type);
void shmBroadcast(const ShmOp& op, void* buffer, size_t bytes, int root);
void shmAlltoallv(const ShmOp& op, const void* in, const std::vector<size_t>& send_counts, void* out,
                  const std::vector<size_t>& recv_counts, DataType type);
void shmBarrier(const ShmOp& op);

// Reduce-scatter reading peers' inputs and allgather writing into peers' outputs with
// cross-memory attach: no staging copy through the slots. No prescale (the reduction reads the inputs as
// they are). Called by shmAllreduce after it published the descriptor.
void shmDirectAllreduce(const ShmOp& op, uint64_t op_slot, const void* in, void* out, size_t count,
                        DataType type, ReduceOp reduce, double postscale);
size_t shmDirectScratchBytes(int local_size);
// Every local rank calls it once, together: true on all of them when each can read and
// write every peer's memory, false on all of them otherwise.
bool shmProbeDirectRead(ShmArena& arena, const ShmWait& wait);
// Every local rank calls it once, together, where the probe succeeded: times the direct and
// the staged allreduce of a 2 MiB buffer on this host (shm_direct_calibration.cc) and returns,
// on all of them alike, whether the direct one is clearly faster. `base` gives the arena, the
// wait and the chunk.
bool shmDirectReadIsFaster(const ShmOp& base);

// Publishes this rank's descriptor; call before the operation's first arrive.
uint64_t shmPublishDescriptor(const ShmOp& op);
// Compares every local rank's descriptor with local rank 0's; throws Error(kMismatch).
void shmCheckDescriptors(const ShmOp& op, uint64_t op_slot);

}  // namespace ronde
