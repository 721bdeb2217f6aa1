#include <algorithm>

#include "collectives/block_layout.h"
#include "collectives/shm_collectives.h"
#include "common/reduce_kernels.h"
#include "ronde/errors.h"

namespace ronde {

// One synchronisation per round: each rank's slot is split into one area per destination
// rank; in round k every rank writes piece k of each block into the matching area, then rank
// r reduces area r of every slot straight into its output.
void shmReducescatter(const ShmOp& op, const void* in, void* out, const std::vector<size_t>& counts,
                      DataType type, ReduceOp reduce, double prescale, double postscale) {
  ShmArena& arena = *op.arena;
  const int n = arena.localSize();
  const size_t me = static_cast<size_t>(arena.localRank());
  const size_t elem = dataTypeSize(type);
  const size_t piece = op.chunkBytes() / static_cast<size_t>(n) / elem;
  RONDE_CHECK(piece > 0, "shared-memory chunk too small for " << n << " ranks");
  const std::vector<size_t> offsets = blockOffsets(counts);
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const size_t rounds = std::max<size_t>(1, (largest + piece - 1) / piece);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  const uint64_t op_slot = shmPublishDescriptor(op);
  auto pieceCount = [&](size_t block, size_t round) { return pieceInRound(counts[block], round, piece); };
  for (size_t k = 0; k < rounds; ++k) {
    const uint64_t step = arena.nextStep();
    char* slot = arena.slot(static_cast<int>(me), step);
    for (size_t j = 0; j < static_cast<size_t>(n); ++j) {
      copyScaled(slot + j * piece * elem, src + (offsets[j] + k * piece) * elem, pieceCount(j, k),
                 type, prescale);
    }
    arena.arrive(step);
    arena.waitAllArrived(step, op.wait);
    if (k == 0) shmCheckDescriptors(op, op_slot);
    for (int i = 0; i < n; ++i) srcs[static_cast<size_t>(i)] = arena.slot(i, step) + me * piece * elem;
    reduceMany(dst + k * piece * elem, srcs.data(), n, pieceCount(me, k), type, reduce, postscale);
  }
}

}  // namespace ronde
