#include "collectives/block_layout.h"
#include "collectives/link_collectives.h"

namespace ronde {

void ringAllgatherBlocks(const LinkGroup& group, void* out, const std::vector<Segment>& blocks,
                         DataType type, const CollectiveContext& ctx) {
  const int n = group.size;
  const size_t elem = dataTypeSize(type);
  char* base = static_cast<char*>(out);
  Link* right = n > 1 ? group.to(group.next()) : nullptr;
  Link* left = n > 1 ? group.to(group.prev()) : nullptr;
  // Step s forwards the block received in step s-1 (block rank-s) and receives block rank-s-1.
  for (int s = 0; s < n - 1; ++s) {
    const Segment& send = blocks[static_cast<size_t>(group.prev(s))];
    const Segment& recv = blocks[static_cast<size_t>(group.prev(s + 1))];
    exchange(right, base + send.offset * elem, send.count * elem, left,
             base + recv.offset * elem, recv.count * elem, ctx);
  }
}

void ringAllgatherv(const LinkGroup& group, void* out, const std::vector<size_t>& counts,
                    DataType type, const CollectiveContext& ctx) {
  ringAllgatherBlocks(group, out, blocksInOrder(counts), type, ctx);
}

}  // namespace ronde
