// Allreduce across hosts of equal rank counts: reduce-scatter inside the host over shared
// memory, allreduce of each local rank's block with its counterparts on the other hosts over
// TCP (every local rank drives its own share, so every rank's connection carries data), then
// allgather inside the host. The buffer goes through in chunks, pipelined: while chunk k
// crosses hosts on a helper thread, the calling thread reduces chunk k+1 and gathers chunk
// k-1 inside the host, so the link does not wait for the shared-memory steps.
#pragma once

#include <cstddef>
#include <functional>

#include "collectives/collective_context.h"
#include "collectives/shm_collectives.h"
#include "ronde/errors.h"

namespace ronde {

struct HierarchicalAllreduce {
  ShmOp local;             // this host's arena and the call's descriptor
  const LinkGroup* cross;  // same local rank on every host; verified by the caller
  CollectiveContext ctx;   // bounds the steps across hosts
  int local_rank = 0;
  int local_size = 1;
  // Bytes of the whole buffer per pipeline step (every rank of the job passes the same). A
  // buffer of at most one chunk runs the three steps one after the other on this thread.
  size_t chunk_bytes = 4 * 1024 * 1024;
  // Called from either thread with the first error it meets, before that thread gives up:
  // it must abort the communicator so that the other thread's waits (shared memory and
  // links) fail at once instead of at the deadline.
  std::function<void(const Error&)> abort_all;
};

// All ranks of the job call it together with the same count, type and op. `in` may be `out`.
void hierarchicalAllreduce(const HierarchicalAllreduce& plan, const void* in, void* out,
                           size_t count, DataType type, ReduceOp op, double prescale,
                           double postscale);

}  // namespace ronde
