#include "collectives/shm_collectives.h"

namespace ronde {

void shmBarrier(const ShmOp& op) {
  ShmArena& arena = *op.arena;
  const uint64_t op_slot = shmPublishDescriptor(op);
  const uint64_t step = arena.nextStep();
  arena.arrive(step);
  arena.waitAllArrived(step, op.wait);
  shmCheckDescriptors(op, op_slot);
}

}  // namespace ronde
