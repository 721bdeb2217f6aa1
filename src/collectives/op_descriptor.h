// A fixed-size description of one collective call. Ranks compare descriptors before moving
// data, so that a disagreement becomes a clear Error(kMismatch) instead of corrupt results
// or a hang.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ronde/types.h"

namespace ronde {

enum class CollectiveKind : uint8_t {
  kAllreduce = 1,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier,
};

const char* collectiveKindName(CollectiveKind kind);

struct OpDescriptor {
  uint64_t op_index = 0;     // position in the communicator's sequence of collectives
  uint64_t count = 0;        // elements (allreduce, broadcast) or total elements (v-forms)
  uint64_t counts_hash = 0;  // hash of per-rank counts (allgatherv, reducescatter)
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = -1;
  // Hash of the communicator's tuning in force: ranks that applied different knobs would
  // run different algorithms, so they must disagree here first.
  uint32_t tuning_hash = 0;
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType type = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  uint8_t reserved[13] = {};
};
static_assert(sizeof(OpDescriptor) == 64, "descriptors travel as 64-byte blocks");

uint64_t hashCounts(const std::vector<size_t>& counts);

// "allreduce of 1000 x float32 (sum)".
std::string describeOp(const OpDescriptor& d);
// Empty when the two agree; else what differs: "count 1000 vs 999".
std::string describeDifference(const OpDescriptor& a, const OpDescriptor& b);

}  // namespace ronde
