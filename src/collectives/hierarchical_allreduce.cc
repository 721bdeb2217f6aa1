#include "collectives/hierarchical_allreduce.h"

#include <algorithm>
#include <vector>

#include "collectives/cross_host_stage.h"
#include "collectives/link_collectives.h"
#include "collectives/ring_pipeline.h"

namespace ronde {
namespace {

// Where one chunk of the buffer lies, and the block of it that this rank carries across hosts.
struct ChunkLayout {
  size_t offset = 0;           // elements, in the whole buffer
  std::vector<size_t> counts;  // per local rank, within the chunk
  Segment mine;            // this rank's block, relative to the chunk
};

std::vector<ChunkLayout> cutIntoChunks(size_t count, size_t elem, size_t chunk_bytes,
                                       int local_rank, int local_size) {
  // Whole cache lines per local rank: every block starts aligned for the vector kernels.
  const size_t granule = static_cast<size_t>(local_size) * std::max<size_t>(1, 64 / elem);
  const size_t per_chunk = std::max(granule, chunk_bytes / elem / granule * granule);
  std::vector<ChunkLayout> chunks;
  for (size_t offset = 0; offset < count || chunks.empty(); offset += per_chunk) {
    ChunkLayout c;
    c.offset = offset;
    std::vector<Segment> blocks = evenSegments(std::min(per_chunk, count - offset), local_size);
    for (const auto& b : blocks) c.counts.push_back(b.count);
    c.mine = blocks[static_cast<size_t>(local_rank)];
    chunks.push_back(std::move(c));
  }
  return chunks;
}

class ChunkSteps {
 public:
  ChunkSteps(const HierarchicalAllreduce& plan, const void* in, void* out, DataType type,
             ReduceOp op, double prescale, double postscale)
      : plan_(plan),
        in_(static_cast<const char*>(in)),
        out_(static_cast<char*>(out)),
        elem_(dataTypeSize(type)),
        type_(type),
        op_(op),
        prescale_(prescale),
        postscale_(postscale) {}

  // In place is safe: round k writes piece k of this rank's block only after every rank
  // copied piece k of its own input in, and no rank reads another's input.
  void reduceInsideHost(const ChunkLayout& c) const {
    shmReducescatter(plan_.local, in_ + c.offset * elem_, myBlock(c), c.counts, type_, op_,
                     prescale_, 1.0);
  }
  void reduceAcrossHosts(const ChunkLayout& c) const {
    ringAllreduce(*plan_.cross, myBlock(c), c.mine.count, type_, op_, postscale_, plan_.ctx);
  }
  void gatherInsideHost(const ChunkLayout& c) const {
    shmAllgatherv(plan_.local, myBlock(c), out_ + c.offset * elem_, c.counts, type_);
  }

 private:
  char* myBlock(const ChunkLayout& c) const { return out_ + (c.offset + c.mine.offset) * elem_; }

  const HierarchicalAllreduce& plan_;
  const char* in_;
  char* out_;
  size_t elem_;
  DataType type_;
  ReduceOp op_;
  double prescale_, postscale_;
};

}  // namespace

void hierarchicalAllreduce(const HierarchicalAllreduce& plan, const void* in, void* out,
                           size_t count, DataType type, ReduceOp op, double prescale,
                           double postscale) {
  const std::vector<ChunkLayout> chunks =
      cutIntoChunks(count, dataTypeSize(type), plan.chunk_bytes, plan.local_rank, plan.local_size);
  const ChunkSteps steps(plan, in, out, type, op, prescale, postscale);
  if (chunks.size() == 1) {
    steps.reduceInsideHost(chunks[0]);
    steps.reduceAcrossHosts(chunks[0]);
    steps.gatherInsideHost(chunks[0]);
    return;
  }
  // Every local rank runs the same sequence of shared-memory steps (reduce 0, reduce 1,
  // gather 0, reduce 2, gather 1, ...), whatever the timing of its own helper thread.
  CrossHostStage stage(
      chunks.size(), [&](size_t k) { steps.reduceAcrossHosts(chunks[k]); }, plan.ctx,
      plan.abort_all);
  runWithCrossHostStage(stage, plan.abort_all, [&] {
    steps.reduceInsideHost(chunks[0]);
    stage.post(0);
    for (size_t k = 0; k < chunks.size(); ++k) {
      if (k + 1 < chunks.size()) {
        steps.reduceInsideHost(chunks[k + 1]);
        stage.post(k + 1);
      }
      stage.waitCrossed(k);
      steps.gatherInsideHost(chunks[k]);
    }
  });
}

}  // namespace ronde
