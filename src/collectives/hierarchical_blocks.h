// The collectives of per-rank blocks across hosts of equal rank counts, in two levels: a ring
// across hosts among the ranks with the same local index (every local rank drives its own,
// in parallel), and shared memory inside each host. The flat ring over every rank carries all
// but one of the job's blocks across each host boundary and runs its steps inside a host over
// TCP; in two levels each host's link carries each of its ranks' blocks once per other host.
// Both go through the buffer in chunks of every block, pipelined: one level works on chunk k
// while the other, on a helper thread, works on the next.
//
//   allgather: each rank gathers its counterparts' blocks around the ring, straight into
//     their places in the output, then the local ranks share what they gathered;
//   reduce-scatter: the local ranks reduce the buffer so that each holds its host's sum of its
//     counterparts' blocks, then the ring reduce-scatters those across hosts.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "collectives/collective_context.h"
#include "collectives/scratch_buffer.h"
#include "collectives/shm_collectives.h"
#include "ronde/errors.h"

namespace ronde {

struct HierarchicalBlocks {
  ShmOp local;             // this host's arena and the call's descriptor
  const LinkGroup* cross;  // same local rank on every host (member h: host h); verified by the caller
  CollectiveContext ctx;   // bounds the steps across hosts
  // The ranks of each host, ascending, in the order of the cross group's members; every host
  // has the same number.
  const std::vector<std::vector<int>>* by_host = nullptr;
  int local_rank = 0;
  // Bytes of the whole buffer per pipeline step (every rank of the job passes the same).
  size_t chunk_bytes = 4 * 1024 * 1024;
  // As HierarchicalAllreduce::abort_all: aborts the communicator from either thread.
  std::function<void(const Error&)> abort_all;
  // The reduce-scatter's work buffer (the caller's, kept between calls); null: its own.
  ScratchBuffer* scratch = nullptr;
};

// All ranks of the job call it together with the same counts and type; rank r contributes
// counts[r] elements and `out` receives every block in rank order. `in` may be this rank's
// block of `out`.
void hierarchicalAllgatherv(const HierarchicalBlocks& plan, const void* in, void* out,
                            const std::vector<size_t>& counts, DataType type);

// All ranks call it together with the same counts, type and op: `in` holds every rank's block
// (sum of counts elements), and rank r's `out` receives block r of their reduction (counts[r]
// elements), prescaled before and postscaled after it.
void hierarchicalReducescatter(const HierarchicalBlocks& plan, const void* in, void* out,
                               const std::vector<size_t>& counts, DataType type, ReduceOp op,
                               double prescale, double postscale);

// Chunk k holds piece k of every rank's block: piece() elements of each, fewer at a block's
// end, so that each chunk is about chunk_bytes of the whole buffer.
class ChunkedBlocks {
 public:
  ChunkedBlocks(const HierarchicalBlocks& plan, const std::vector<size_t>& counts, size_t elem);

  size_t chunks() const { return chunks_; }
  // Where chunk k starts within each block, in elements.
  size_t start(size_t k) const { return k * piece_; }
  // Elements of rank r's block in chunk k.
  size_t count(int r, size_t k) const;
  // Appends chunk k of the blocks of the ranks with local index `local` on every host, by
  // host, where they lie in a buffer of every block in rank order.
  void appendColumn(int local, size_t k, std::vector<Segment>& blocks) const;
  // Elements of chunk k of one column (local index `local`): its pieces on every host.
  size_t columnCount(int local, size_t k) const;

 private:
  const std::vector<std::vector<int>>& by_host_;
  const std::vector<size_t>& counts_;
  const std::vector<size_t> offsets_;
  size_t piece_ = 1;
  size_t chunks_ = 1;
};

}  // namespace ronde
