// Arithmetic shared by the v-collectives: where each rank's block starts, and how much of a
// block falls into one round of a chunked algorithm.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ronde {

// offsets[i] = counts[0] + ... + counts[i-1].
inline std::vector<size_t> blockOffsets(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

// Elements of a block of `total` elements that round `round` moves, `piece` per round.
inline size_t pieceInRound(size_t total, size_t round, size_t piece) {
  size_t start = round * piece;
  return total > start ? std::min(piece, total - start) : 0;
}

}  // namespace ronde
