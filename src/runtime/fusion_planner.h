// Tensor Fusion's plan: which of a cycle's responses run together in one fusion buffer.
// Requests of the same process set, kind, dtype, op, scale factors (and root) are packed, in
// response order, up to the fusion threshold: allreduces, allgathers (counted by their whole
// output) and broadcasts; everything else runs alone. The plan depends only on the
// responses and the agreed threshold, so every rank makes the same one.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/response.h"

namespace ronde::runtime {

struct ExecutionUnit {
  std::vector<size_t> responses;  // indices into the cycle's responses
};

std::vector<ExecutionUnit> planExecution(const std::vector<Response>& responses,
                                         int64_t fusion_threshold_bytes);

}  // namespace ronde::runtime
