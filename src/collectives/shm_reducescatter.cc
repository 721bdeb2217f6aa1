#include <algorithm>

#include "collectives/block_layout.h"
#include "collectives/shm_collectives.h"
#include "common/reduce_kernels.h"
#include "ronde/errors.h"

namespace ronde {

// One synchronisation per round: each rank's slot is split into one area per destination
// rank; in round k every rank writes piece k of each destination's blocks into the matching
// area, then rank r reduces area r of every slot straight into its output.
void shmReducescatterSegments(const ShmOp& op, const void* in, void* out,
                              std::span<const Segment> segments, size_t per_rank, DataType type,
                              ReduceOp reduce, double prescale, double postscale) {
  ShmArena& arena = *op.arena;
  const size_t n = static_cast<size_t>(arena.localSize());
  const size_t me = static_cast<size_t>(arena.localRank());
  const size_t elem = dataTypeSize(type);
  const size_t piece = op.chunkBytes() / n / elem;
  RONDE_CHECK(piece > 0, "shared-memory chunk too small for " << n << " ranks");
  auto of = [&](size_t j) { return segments.subspan(j * per_rank, per_rank); };
  std::vector<size_t> totals(n);
  for (size_t j = 0; j < n; ++j) totals[j] = totalCount(of(j));
  const size_t largest = *std::max_element(totals.begin(), totals.end());
  const size_t rounds = std::max<size_t>(1, (largest + piece - 1) / piece);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  std::vector<const void*> srcs(n);
  const uint64_t op_slot = shmPublishDescriptor(op);
  for (size_t k = 0; k < rounds; ++k) {
    const uint64_t step = arena.nextStep();
    char* slot = arena.slot(static_cast<int>(me), step);
    for (size_t j = 0; j < n; ++j) {
      char* area = slot + j * piece * elem;
      forEachStretch(of(j), k * piece, pieceInRound(totals[j], k, piece), [&](size_t at, size_t c) {
        copyScaled(area, src + at * elem, c, type, prescale);
        area += c * elem;
      });
    }
    arena.arrive(step);
    arena.waitAllArrived(step, op.wait);
    if (k == 0) shmCheckDescriptors(op, op_slot);
    for (size_t i = 0; i < n; ++i) srcs[i] = arena.slot(static_cast<int>(i), step) + me * piece * elem;
    reduceMany(dst + k * piece * elem, srcs.data(), static_cast<int>(n),
               pieceInRound(totals[me], k, piece), type, reduce, postscale);
  }
}

void shmReducescatter(const ShmOp& op, const void* in, void* out, const std::vector<size_t>& counts,
                      DataType type, ReduceOp reduce, double prescale, double postscale) {
  shmReducescatterSegments(op, in, out, blocksInOrder(counts), 1, type, reduce, prescale,
                           postscale);
}

}  // namespace ronde
