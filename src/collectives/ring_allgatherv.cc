#include "collectives/block_layout.h"
#include "collectives/link_collectives.h"

namespace ronde {

void ringAllgatherv(const LinkGroup& group, void* out, const std::vector<size_t>& counts,
                    DataType type, const CollectiveContext& ctx) {
  const int n = group.size;
  const size_t elem = dataTypeSize(type);
  const std::vector<size_t> offsets = blockOffsets(counts);
  char* base = static_cast<char*>(out);
  Link* right = n > 1 ? group.to(group.next()) : nullptr;
  Link* left = n > 1 ? group.to(group.prev()) : nullptr;
  // Step s forwards the block received in step s-1 (block rank-s) and receives block rank-s-1.
  for (int s = 0; s < n - 1; ++s) {
    size_t send_block = static_cast<size_t>(group.prev(s));
    size_t recv_block = static_cast<size_t>(group.prev(s + 1));
    exchange(right, base + offsets[send_block] * elem, counts[send_block] * elem, left,
             base + offsets[recv_block] * elem, counts[recv_block] * elem, ctx);
  }
}

}  // namespace ronde
