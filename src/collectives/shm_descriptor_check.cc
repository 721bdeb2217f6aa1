#include <cstring>

#include "collectives/shm_collectives.h"
#include "ronde/errors.h"

namespace ronde {

uint64_t shmPublishDescriptor(const ShmOp& op) {
  uint64_t slot = op.arena->nextOp();
  op.arena->publishDescriptor(slot, &op.descriptor);
  return slot;
}

void shmCheckDescriptors(const ShmOp& op, uint64_t op_slot) {
  const ShmArena& arena = *op.arena;
  const auto* first = static_cast<const OpDescriptor*>(arena.descriptor(0, op_slot));
  for (int i = 1; i < arena.localSize(); ++i) {
    const auto* other = static_cast<const OpDescriptor*>(arena.descriptor(i, op_slot));
    if (std::memcmp(first, other, sizeof(OpDescriptor)) == 0) continue;  // the common case
    std::string difference = describeDifference(*first, *other);
    if (first->op_index != other->op_index && difference.empty()) {
      difference = "collective number " + std::to_string(first->op_index) + " vs " +
                   std::to_string(other->op_index);
    }
    if (!difference.empty()) {
      // Every rank compares the same pairs, so every rank throws this same message.
      throw makeError(ErrorCode::kMismatch, "ranks disagree on ", describeOp(*first), ": ",
                      arena.memberName(0), " vs ", arena.memberName(i), ": ", difference);
    }
  }
}

}  // namespace ronde
