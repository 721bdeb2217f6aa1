#include "collectives/block_layout.h"
#include "collectives/link_collectives.h"
#include "collectives/ring_pipeline.h"

namespace ronde {
namespace {

RingPlan reducescatterPlan(const LinkGroup& group, void* work, std::vector<Segment> blocks,
                           DataType type, ReduceOp op) {
  const int n = group.size;
  RingPlan plan;
  plan.buffer = static_cast<char*>(work);
  plan.type = type;
  plan.op = op;
  plan.segments = std::move(blocks);
  // Shifted by one against the allreduce ring so that rank r ends owning block r: step s
  // sends block r-s-1 and receives block r-s-2, so each block is received (and reduced) once
  // and only step 0 sends one this rank has not reduced, its own input's block r-1.
  const int r = group.rank;
  for (int s = 0; s < n - 1; ++s) {
    plan.steps.push_back({(r - s - 1 + 2 * n) % n, (r - s - 2 + 2 * n) % n, true});
  }
  return plan;
}

}  // namespace

void ringReducescatterBlocks(const LinkGroup& group, void* work, std::vector<Segment> blocks,
                             DataType type, ReduceOp op, const CollectiveContext& ctx) {
  if (group.size == 1) return;
  runRingPipeline(group, reducescatterPlan(group, work, std::move(blocks), type, op), ctx);
}

void ringReducescatter(const LinkGroup& group, void* work, const std::vector<size_t>& counts,
                       DataType type, ReduceOp op, const CollectiveContext& ctx) {
  ringReducescatterBlocks(group, work, blocksInOrder(counts), type, op, ctx);
}

void ringReducescatter(const LinkGroup& group, const void* in, void* work,
                       const std::vector<size_t>& counts, DataType type, ReduceOp op,
                       const std::function<void(size_t offset, size_t count)>& done,
                       const CollectiveContext& ctx) {
  RingPlan plan = reducescatterPlan(group, work, blocksInOrder(counts), type, op);
  plan.input = static_cast<const char*>(in);
  // The last step receives block group.rank: its chunks are final as they arrive.
  const int last = group.size - 2;
  plan.on_chunk_done = [&done, last](int step, size_t offset, size_t count) {
    if (step == last) done(offset, count);
  };
  runRingPipeline(group, plan, ctx);
}

}  // namespace ronde
