// Tensor Fusion's plan: which of a cycle's responses run together in one fusion buffer.
// Requests of the same process set, kind, dtype, op, scale factors (and root) are packed, in
// response order, up to the fusion threshold: allreduces, allgathers (counted by their whole
// output), broadcasts and reducescatters (counted by their whole input) of at most
// max_tensor_bytes each (0: no limit); everything else (alltoall, barrier, join, process-set
// changes) runs alone, in place. Fusion saves the start-up of a collective per tensor and costs a copy in
// and out of the buffer: a win for small tensors, a loss for large ones (a step of 16 x 1 MiB
// took 7.4-8.0 ms fused against 2.9-3.2 ms alone, docs/benchmarks.md). The plan depends only
// on the responses and the agreed limits, so every rank makes the same one.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/response.h"

namespace ronde::runtime {

struct ExecutionUnit {
  std::vector<size_t> responses;  // indices into the cycle's responses
};

std::vector<ExecutionUnit> planExecution(const std::vector<Response>& responses,
                                         int64_t fusion_threshold_bytes,
                                         int64_t max_tensor_bytes = 0);

}  // namespace ronde::runtime
