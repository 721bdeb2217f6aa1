// The engine under ring allreduce and ring reduce-scatter: a list of steps, each sending one
// segment of a buffer to the right neighbour while receiving another from the left one.
// Segments are cut into chunks and pipelined across steps: chunk c of step t is forwarded as
// soon as it arrived (and was reduced) in step t-1, so sending, receiving and reducing
// overlap instead of alternating.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "collectives/block_layout.h"
#include "collectives/collective_context.h"
#include "ronde/types.h"

namespace ronde {

struct RingStep {
  int send_segment;
  int recv_segment;
  bool reduce;  // true: received data is reduced into the buffer; false: copied over it
};

struct RingPlan {
  char* buffer = nullptr;
  // Out of place: the caller's input, never written. Step 0 sends from it, and a reducing
  // step computes buffer = input (op) received, so `buffer` needs no copy of the input first
  // (at 16 MiB that copy was a quarter of a TCP allreduce's time). Null: `buffer` holds the
  // input. Only valid when every segment is reduced at most once per rank and sent from
  // `input` only in step 0, as in ring allreduce.
  const char* input = nullptr;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<Segment> segments;
  std::vector<RingStep> steps;
  // Called once a chunk of step `step` is in the buffer (after its reduction), on the calling
  // thread; used to apply the post-scale to final values while they are still in cache.
  std::function<void(int step, size_t offset, size_t count)> on_chunk_done;
};

void runRingPipeline(const LinkGroup& group, const RingPlan& plan, const CollectiveContext& ctx);

// Splits `count` elements into `parts` nearly equal segments (sizes differ by at most one).
std::vector<Segment> evenSegments(size_t count, int parts);

}  // namespace ronde
