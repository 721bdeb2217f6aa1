#include "collectives/link_collectives.h"
#include "collectives/ring_pipeline.h"

namespace ronde {

void ringReducescatterBlocks(const LinkGroup& group, void* work, std::vector<Segment> blocks,
                             DataType type, ReduceOp op, const CollectiveContext& ctx) {
  const int n = group.size;
  if (n == 1) return;
  RingPlan plan;
  plan.buffer = static_cast<char*>(work);
  plan.type = type;
  plan.op = op;
  plan.segments = std::move(blocks);
  // Shifted by one against the allreduce ring so that rank r ends owning block r.
  const int r = group.rank;
  for (int s = 0; s < n - 1; ++s) {
    plan.steps.push_back({(r - s - 1 + 2 * n) % n, (r - s - 2 + 2 * n) % n, true});
  }
  runRingPipeline(group, plan, ctx);
}

void ringReducescatter(const LinkGroup& group, void* work, const std::vector<size_t>& counts,
                       DataType type, ReduceOp op, const CollectiveContext& ctx) {
  std::vector<Segment> blocks;
  size_t offset = 0;
  for (size_t c : counts) {
    blocks.push_back({offset, c});
    offset += c;
  }
  ringReducescatterBlocks(group, work, std::move(blocks), type, op, ctx);
}

}  // namespace ronde
