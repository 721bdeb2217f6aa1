#include <algorithm>
#include <cstring>

#include "collectives/block_layout.h"
#include "collectives/shm_collectives.h"

namespace ronde {

void shmAllgatherSegments(const ShmOp& op, const void* mine, void* out,
                          std::span<const Segment> segments, size_t per_rank, DataType type) {
  ShmArena& arena = *op.arena;
  const size_t n = static_cast<size_t>(arena.localSize());
  const size_t me = static_cast<size_t>(arena.localRank());
  const size_t elem = dataTypeSize(type);
  const size_t piece = op.chunkBytes() / elem;
  auto of = [&](size_t j) { return segments.subspan(j * per_rank, per_rank); };
  size_t largest = 0;
  for (size_t j = 0; j < n; ++j) largest = std::max(largest, totalCount(of(j)));
  const size_t rounds = std::max<size_t>(1, (largest + piece - 1) / piece);
  const size_t own_total = totalCount(of(me));
  const auto* src = static_cast<const char*>(mine);
  const uint64_t op_slot = shmPublishDescriptor(op);
  for (size_t k = 0; k < rounds; ++k) {
    const uint64_t step = arena.nextStep();
    const size_t own = pieceInRound(own_total, k, piece);
    if (own > 0) {
      auto* slot = static_cast<char*>(arena.slot(static_cast<int>(me), step));
      if (src != nullptr) {
        std::memcpy(slot, src + k * piece * elem, own * elem);
      } else {
        gatherSegments(out, of(me), k * piece, own, elem, slot);
      }
    }
    arena.arrive(step);
    arena.waitAllArrived(step, op.wait);
    if (k == 0) shmCheckDescriptors(op, op_slot);
    for (size_t j = 0; j < n; ++j) {
      // Without `mine` this rank's own blocks are already in place.
      if (j == me && src == nullptr) continue;
      const size_t count = pieceInRound(totalCount(of(j)), k, piece);
      if (count == 0) continue;
      scatterSegments(static_cast<const char*>(arena.slot(static_cast<int>(j), step)), of(j),
                      k * piece, count, elem, out);
    }
  }
}

void shmAllgatherv(const ShmOp& op, const void* in, void* out, const std::vector<size_t>& counts,
                   DataType type) {
  // An empty contribution may come with a null `in`, which then reads nothing from `out`.
  shmAllgatherSegments(op, in, out, blocksInOrder(counts), 1, type);
}

}  // namespace ronde
