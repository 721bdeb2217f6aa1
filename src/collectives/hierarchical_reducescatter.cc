#include "collectives/block_layout.h"
#include "collectives/cross_host_stage.h"
#include "collectives/hierarchical_blocks.h"
#include "collectives/link_collectives.h"
#include "common/reduce_kernels.h"

namespace ronde {

void hierarchicalReducescatter(const HierarchicalBlocks& plan, const void* in, void* out,
                               const std::vector<size_t>& counts, DataType type, ReduceOp op,
                               double prescale, double postscale) {
  const size_t elem = dataTypeSize(type);
  const auto& hosts = *plan.by_host;
  const int local_size = static_cast<int>(hosts.front().size());
  const int local = plan.local_rank;
  const size_t host = static_cast<size_t>(plan.cross->rank);
  const int me = hosts[host][static_cast<size_t>(local)];
  const ChunkedBlocks blocks(plan, counts, elem);
  // This rank's column (its counterparts' blocks, and its own), chunk after chunk: chunk k
  // holds piece k of every host's block, by host, from column_start[k] on.
  std::vector<size_t> column_start(blocks.chunks() + 1, 0);
  for (size_t k = 0; k < blocks.chunks(); ++k)
    column_start[k + 1] = column_start[k] + blocks.columnCount(local, k);
  ScratchBuffer own_scratch;
  char* const column = (plan.scratch ? *plan.scratch : own_scratch).get(column_start.back() * elem);

  auto reduceInsideHost = [&](size_t k) {
    std::vector<Segment> every_column;
    for (int j = 0; j < local_size; ++j) blocks.appendColumn(j, k, every_column);
    shmReducescatterSegments(plan.local, in, column + column_start[k] * elem, every_column,
                             hosts.size(), type, op, prescale, 1.0);
  };
  auto reduceAcrossHosts = [&](size_t k) {
    std::vector<Segment> pieces;
    size_t at = column_start[k];
    for (const auto& ranks : hosts) {
      const size_t c = blocks.count(ranks[static_cast<size_t>(local)], k);
      pieces.push_back(Segment{at, c});
      at += c;
    }
    ringReducescatterBlocks(*plan.cross, column, std::move(pieces), type, op, plan.ctx);
  };
  auto deliver = [&](size_t k) {
    size_t at = column_start[k];
    for (size_t h = 0; h < host; ++h) at += blocks.count(hosts[h][static_cast<size_t>(local)], k);
    copyScaled(static_cast<char*>(out) + blocks.start(k) * elem, column + at * elem,
               blocks.count(me, k), type, postscale);
  };
  if (blocks.chunks() == 1) {
    reduceInsideHost(0);
    reduceAcrossHosts(0);
    deliver(0);
    return;
  }
  // As the hierarchical allreduce: chunk k crosses hosts on the helper thread while this
  // thread reduces chunk k+1 inside the host; every local rank runs the same shared-memory
  // steps in the same order.
  CrossHostStage stage(blocks.chunks(), reduceAcrossHosts, plan.ctx, plan.abort_all);
  runWithCrossHostStage(stage, plan.abort_all, [&] {
    reduceInsideHost(0);
    stage.post(0);
    for (size_t k = 0; k < blocks.chunks(); ++k) {
      if (k + 1 < blocks.chunks()) {
        reduceInsideHost(k + 1);
        stage.post(k + 1);
      }
      stage.waitCrossed(k);
      deliver(k);
    }
  });
}

}  // namespace ronde
