#include "collectives/link_collectives.h"
#include "collectives/ring_pipeline.h"
#include "common/reduce_kernels.h"

namespace ronde {

void ringAllreduce(const LinkGroup& group, void* buffer, size_t count, DataType type,
                   ReduceOp op, double postscale, const CollectiveContext& ctx) {
  ringAllreduce(group, buffer, buffer, count, type, op, postscale, ctx);
}

void ringAllreduce(const LinkGroup& group, const void* in, void* out, size_t count, DataType type,
                   ReduceOp op, double postscale, const CollectiveContext& ctx) {
  const int n = group.size;
  if (n == 1 || count == 0) {
    copyScaled(out, in, count, type, postscale);
    return;
  }
  RingPlan plan;
  plan.buffer = static_cast<char*>(out);
  if (in != out) plan.input = static_cast<const char*>(in);
  plan.type = type;
  plan.op = op;
  plan.segments = evenSegments(count, n);
  const int r = group.rank;
  // Reduce-scatter: after n-1 steps this rank owns segment r+1 fully reduced.
  for (int s = 0; s < n - 1; ++s) {
    plan.steps.push_back({(r - s + n) % n, (r - s - 1 + 2 * n) % n, true});
  }
  // Allgather: pass the owned segments around.
  for (int s = 0; s < n - 1; ++s) {
    plan.steps.push_back({(r + 1 - s + n) % n, (r - s + n) % n, false});
  }
  const size_t elem = dataTypeSize(type);
  const int last_reduce_step = n - 2;
  if (postscale != 1.0) {
    plan.on_chunk_done = [&](int step, size_t offset, size_t chunk_count) {
      if (step != last_reduce_step) return;
      char* p = plan.buffer + offset * elem;
      copyScaled(p, p, chunk_count, type, postscale);
    };
  }
  runRingPipeline(group, plan, ctx);
}

}  // namespace ronde
