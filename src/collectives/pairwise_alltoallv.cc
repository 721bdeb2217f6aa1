#include <cstring>

#include "collectives/block_layout.h"
#include "collectives/link_collectives.h"

namespace ronde {

void pairwiseAlltoallv(const LinkGroup& group, const void* in, const std::vector<size_t>& send_counts,
                       void* out, const std::vector<size_t>& recv_counts, DataType type,
                       const CollectiveContext& ctx) {
  const int n = group.size;
  const size_t elem = dataTypeSize(type);
  const std::vector<size_t> send_offsets = blockOffsets(send_counts);
  const std::vector<size_t> recv_offsets = blockOffsets(recv_counts);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const size_t me = static_cast<size_t>(group.rank);
  if (recv_counts[me] > 0) {
    std::memmove(dst + recv_offsets[me] * elem, src + send_offsets[me] * elem, recv_counts[me] * elem);
  }
  // In step s every rank sends to rank+s and receives from rank-s: each pair talks once.
  for (int s = 1; s < n; ++s) {
    size_t to = static_cast<size_t>(group.next(s));
    size_t from = static_cast<size_t>(group.prev(s));
    exchange(group.to(static_cast<int>(to)), src + send_offsets[to] * elem, send_counts[to] * elem,
             group.to(static_cast<int>(from)), dst + recv_offsets[from] * elem,
             recv_counts[from] * elem, ctx);
  }
}

}  // namespace ronde
