#include "collectives/hierarchical_blocks.h"

#include <algorithm>
#include <cstring>

#include "collectives/block_layout.h"
#include "collectives/cross_host_stage.h"
#include "collectives/link_collectives.h"

namespace ronde {

void hierarchicalAllgatherv(const HierarchicalBlocks& plan, const void* in, void* out,
                            const std::vector<size_t>& counts, DataType type) {
  const size_t elem = dataTypeSize(type);
  const auto& hosts = *plan.by_host;
  const int local_size = static_cast<int>(hosts.front().size());
  const size_t me = static_cast<size_t>(hosts[static_cast<size_t>(plan.cross->rank)]
                                             [static_cast<size_t>(plan.local_rank)]);
  char* mine = static_cast<char*>(out) + blockOffsets(counts)[me] * elem;
  // An empty contribution may come with a null pointer: memmove forbids it even for 0 bytes.
  if (mine != in && counts[me] > 0) std::memmove(mine, in, counts[me] * elem);

  const ChunkedBlocks blocks(plan, counts, elem);
  auto cross = [&](size_t k) {
    std::vector<Segment> column;
    blocks.appendColumn(plan.local_rank, k, column);
    ringAllgatherBlocks(*plan.cross, out, column, type, plan.ctx);
  };
  auto share = [&](size_t k) {
    std::vector<Segment> every_column;
    for (int j = 0; j < local_size; ++j) blocks.appendColumn(j, k, every_column);
    shmAllgatherSegments(plan.local, nullptr, out, every_column, hosts.size(), type);
  };
  if (blocks.chunks() == 1) {
    cross(0);
    share(0);
    return;
  }
  // The steps across hosts need nothing from inside the host: every chunk may cross at once,
  // and the helper runs ahead while this thread shares the chunks that arrived.
  CrossHostStage stage(blocks.chunks(), cross, plan.ctx, plan.abort_all);
  runWithCrossHostStage(stage, plan.abort_all, [&] {
    stage.post(blocks.chunks() - 1);
    for (size_t k = 0; k < blocks.chunks(); ++k) {
      stage.waitCrossed(k);
      share(k);
    }
  });
}

}  // namespace ronde
