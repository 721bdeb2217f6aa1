#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/shm_collectives.h"
#include "common/reduce_kernels.h"

namespace ronde {
namespace {

// Pointers to every local rank's slot, on the stack for the usual few ranks.
class SourceList {
 public:
  explicit SourceList(int n) : heap_(n > 64 ? static_cast<size_t>(n) : 0) {}
  const void** data() { return heap_.empty() ? stack_ : heap_.data(); }

 private:
  const void* stack_[64];
  std::vector<const void*> heap_;
};

// Every rank reduces all slots itself, chunk by chunk, in the same order as every other rank,
// so results are bitwise identical everywhere. One synchronisation per chunk: a slot is
// rewritten two steps later, and every rank arrives at the step in between only after it
// finished reading. For small buffers this beats splitting the reduction, which needs a
// second synchronisation and a copy out of a shared result. (Measured for large buffers on
// 2 ranks too: splitting wins there once the cores are busy, since replication doubles the
// reduction work.)
void replicatedReduce(const ShmOp& op, uint64_t op_slot, const void* in, void* out, size_t count,
                      DataType type, ReduceOp reduce, double prescale, double postscale) {
  ShmArena& arena = *op.arena;
  const int n = arena.localSize();
  const size_t elem = dataTypeSize(type);
  const size_t chunk_elems = op.chunkBytes() / elem;
  const size_t chunks = std::max<size_t>(1, (count + chunk_elems - 1) / chunk_elems);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  SourceList sources(n);
  const void** srcs = sources.data();
  for (size_t k = 0; k < chunks; ++k) {
    const size_t offset = k * chunk_elems;
    const size_t chunk_count = std::min(chunk_elems, count - std::min(count, offset));
    const uint64_t step = arena.nextStep();
    copyScaled(arena.slot(arena.localRank(), step), src + offset * elem, chunk_count, type, prescale);
    arena.arrive(step);
    arena.waitAllArrived(step, op.wait);
    if (k == 0) shmCheckDescriptors(op, op_slot);
    for (int i = 0; i < n; ++i) srcs[i] = arena.slot(i, step);
    reduceMany(dst + offset * elem, srcs, n, chunk_count, type, reduce, postscale);
  }
}

}  // namespace

// Large buffers, chunk by chunk: copy the chunk in, wait for all; reduce this rank's share of
// the chunk from all slots into the shared result, wait for all; copy the whole chunk out.
// Double buffering by step parity makes reuse safe: the result area of step s is rewritten at
// step s+2 only after every rank arrived at s+1, i.e. after each copied chunk s out.
void shmAllreduce(const ShmOp& op, const void* in, void* out, size_t count, DataType type,
                  ReduceOp reduce, double prescale, double postscale) {
  ShmArena& arena = *op.arena;
  const int n = arena.localSize();
  const int me = arena.localRank();
  const size_t elem = dataTypeSize(type);
  const size_t chunk_elems = op.chunkBytes() / elem;
  const uint64_t op_slot = shmPublishDescriptor(op);
  if (count * elem <= op.single_step_bytes) {
    replicatedReduce(op, op_slot, in, out, count, type, reduce, prescale, postscale);
    return;
  }
  if (op.direct_read && prescale == 1.0) {
    shmDirectAllreduce(op, op_slot, in, out, count, type, reduce, postscale);
    return;
  }
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const size_t chunks = std::max<size_t>(1, (count + chunk_elems - 1) / chunk_elems);
  SourceList sources(n);
  const void** srcs = sources.data();
  for (size_t k = 0; k < chunks; ++k) {
    const size_t offset = k * chunk_elems;
    const size_t chunk_count = std::min(chunk_elems, count - std::min(count, offset));
    const uint64_t step = arena.nextStep();
    // This rank's share: nearly equal parts, the first (chunk_count % n) one element larger.
    const size_t base = chunk_count / static_cast<size_t>(n);
    const size_t extra = chunk_count % static_cast<size_t>(n);
    const size_t mine = base + (static_cast<size_t>(me) < extra ? 1 : 0);
    const size_t start = base * static_cast<size_t>(me) + std::min<size_t>(static_cast<size_t>(me), extra);
    char* my_slot = arena.slot(me, step);
    const char* chunk_in = src + offset * elem;
    // Peers read only their own shares of this slot, so without a prescale this rank's share
    // stays where it is and is reduced straight from the input: a copy of 1/n of the traffic
    // saved (the input is not written before this chunk's reduction, even in place).
    const bool share_in_place = prescale == 1.0;
    if (share_in_place) {
      const size_t after = chunk_count - start - mine;
      if (start > 0) std::memcpy(my_slot, chunk_in, start * elem);
      if (after > 0)
        std::memcpy(my_slot + (start + mine) * elem, chunk_in + (start + mine) * elem,
                    after * elem);
    } else {
      copyScaled(my_slot, chunk_in, chunk_count, type, prescale);
    }
    arena.arrive(step);
    arena.waitAllArrived(step, op.wait);
    if (k == 0) shmCheckDescriptors(op, op_slot);
    for (int i = 0; i < n; ++i) srcs[i] = arena.slot(i, step) + start * elem;
    if (share_in_place) srcs[me] = chunk_in + start * elem;
    reduceMany(arena.result(step) + start * elem, srcs, n, mine, type, reduce, postscale);
    arena.markReduced(step);
    arena.waitAllReduced(step, op.wait);
    std::memcpy(dst + offset * elem, arena.result(step), chunk_count * elem);
  }
}

}  // namespace ronde
