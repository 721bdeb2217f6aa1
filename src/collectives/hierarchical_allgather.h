// Allgather across hosts of equal rank counts: every local rank gathers its counterparts'
// blocks (the ranks with its local index on the other hosts) around a ring over TCP, then the
// local ranks share what they gathered over shared memory. Each host's link carries its
// ranks' blocks once per other host, where one flat ring over every rank carries all but one
// of the job's blocks across each host boundary, and the ranks of a host exchange through
// shared memory instead of TCP. The buffer goes through in chunks, pipelined: while chunk k
// is shared inside the host, later chunks cross hosts on a helper thread.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "collectives/collective_context.h"
#include "collectives/shm_collectives.h"
#include "ronde/errors.h"

namespace ronde {

struct HierarchicalAllgather {
  ShmOp local;             // this host's arena and the call's descriptor
  const LinkGroup* cross;  // same local rank on every host (member h: host h); verified by the caller
  CollectiveContext ctx;   // bounds the steps across hosts
  // The ranks of each host, ascending, in the order of the cross group's members; every host
  // has the same number.
  const std::vector<std::vector<int>>* by_host = nullptr;
  int local_rank = 0;
  // Bytes of the whole output per pipeline step (every rank of the job passes the same).
  size_t chunk_bytes = 4 * 1024 * 1024;
  // As HierarchicalAllreduce::abort_all: aborts the communicator from either thread.
  std::function<void(const Error&)> abort_all;
};

// All ranks of the job call it together with the same counts and type; rank r contributes
// counts[r] elements and `out` receives every block in rank order. `in` may be this rank's
// block of `out`.
void hierarchicalAllgatherv(const HierarchicalAllgather& plan, const void* in, void* out,
                            const std::vector<size_t>& counts, DataType type);

}  // namespace ronde
