#include <algorithm>
#include <cstring>

#include "collectives/shm_collectives.h"

namespace ronde {

void shmBroadcast(const ShmOp& op, void* buffer, size_t bytes, int root) {
  ShmArena& arena = *op.arena;
  const size_t chunk = op.chunkBytes();
  const size_t rounds = std::max<size_t>(1, (bytes + chunk - 1) / chunk);
  auto* data = static_cast<char*>(buffer);
  const bool is_root = arena.localRank() == root;
  const uint64_t op_slot = shmPublishDescriptor(op);
  for (size_t k = 0; k < rounds; ++k) {
    const uint64_t step = arena.nextStep();
    const size_t offset = k * chunk;
    const size_t size = bytes > offset ? std::min(chunk, bytes - offset) : 0;
    if (is_root && size > 0) std::memcpy(arena.slot(root, step), data + offset, size);
    // Everyone arrives, not only the root: the root may reuse this slot two steps later
    // only once every reader is past it.
    arena.arrive(step);
    arena.waitAllArrived(step, op.wait);
    if (k == 0) shmCheckDescriptors(op, op_slot);
    if (!is_root && size > 0) std::memcpy(data + offset, arena.slot(root, step), size);
  }
}

}  // namespace ronde
