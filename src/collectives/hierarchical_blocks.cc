#include "collectives/hierarchical_blocks.h"

#include <algorithm>

#include "collectives/block_layout.h"

namespace ronde {

ChunkedBlocks::ChunkedBlocks(const HierarchicalBlocks& plan, const std::vector<size_t>& counts,
                             size_t elem)
    : by_host_(*plan.by_host), counts_(counts), offsets_(blockOffsets(counts)) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const size_t wanted = std::max<size_t>(1, (total * elem + plan.chunk_bytes - 1) / plan.chunk_bytes);
  piece_ = std::max<size_t>(1, (largest + wanted - 1) / wanted);
  chunks_ = std::max<size_t>(1, (largest + piece_ - 1) / piece_);
}

size_t ChunkedBlocks::count(int r, size_t k) const {
  return pieceInRound(counts_[static_cast<size_t>(r)], k, piece_);
}

void ChunkedBlocks::appendColumn(int local, size_t k, std::vector<Segment>& blocks) const {
  for (const auto& ranks : by_host_) {
    const int r = ranks[static_cast<size_t>(local)];
    blocks.push_back(Segment{offsets_[static_cast<size_t>(r)] + k * piece_, count(r, k)});
  }
}

size_t ChunkedBlocks::columnCount(int local, size_t k) const {
  size_t total = 0;
  for (const auto& ranks : by_host_) total += count(ranks[static_cast<size_t>(local)], k);
  return total;
}

}  // namespace ronde
