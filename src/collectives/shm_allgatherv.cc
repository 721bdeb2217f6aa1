#include <algorithm>
#include <cstring>

#include "collectives/block_layout.h"
#include "collectives/shm_collectives.h"

namespace ronde {

void shmAllgatherv(const ShmOp& op, const void* in, void* out, const std::vector<size_t>& counts,
                   DataType type) {
  ShmArena& arena = *op.arena;
  const int n = arena.localSize();
  const int me = arena.localRank();
  const size_t elem = dataTypeSize(type);
  const size_t piece = op.chunkBytes() / elem;
  const std::vector<size_t> offsets = blockOffsets(counts);
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const size_t rounds = std::max<size_t>(1, (largest + piece - 1) / piece);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  auto pieceCount = [&](size_t block, size_t round) { return pieceInRound(counts[block], round, piece); };
  const uint64_t op_slot = shmPublishDescriptor(op);
  for (size_t k = 0; k < rounds; ++k) {
    const uint64_t step = arena.nextStep();
    size_t mine = pieceCount(static_cast<size_t>(me), k);
    if (mine > 0) std::memcpy(arena.slot(me, step), src + k * piece * elem, mine * elem);
    arena.arrive(step);
    arena.waitAllArrived(step, op.wait);
    if (k == 0) shmCheckDescriptors(op, op_slot);
    for (int j = 0; j < n; ++j) {
      size_t count = pieceCount(static_cast<size_t>(j), k);
      if (count == 0) continue;
      std::memcpy(dst + (offsets[static_cast<size_t>(j)] + k * piece) * elem, arena.slot(j, step),
                  count * elem);
    }
  }
}

}  // namespace ronde
