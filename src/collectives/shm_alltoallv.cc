#include <algorithm>
#include <cstring>
#include <sstream>

#include "collectives/block_layout.h"
#include "collectives/shm_collectives.h"
#include "ronde/errors.h"

namespace ronde {

// First step: every rank publishes its send and receive counts, so every rank can check the
// whole matrix (rank i's send_counts[j] must equal rank j's recv_counts[i]) and all report
// the same mismatch. Then rounds as in reducescatter: slot area j carries a piece for rank j.
void shmAlltoallv(const ShmOp& op, const void* in, const std::vector<size_t>& send_counts, void* out,
                  const std::vector<size_t>& recv_counts, DataType type) {
  ShmArena& arena = *op.arena;
  const size_t n = static_cast<size_t>(arena.localSize());
  const int me = arena.localRank();
  const size_t elem = dataTypeSize(type);
  RONDE_CHECK(op.chunkBytes() >= 2 * n * sizeof(uint64_t), "chunk too small for the counts");
  const uint64_t op_slot = shmPublishDescriptor(op);

  uint64_t step = arena.nextStep();
  auto* mine = reinterpret_cast<uint64_t*>(arena.slot(me, step));
  for (size_t j = 0; j < n; ++j) {
    mine[j] = send_counts[j];
    mine[n + j] = recv_counts[j];
  }
  arena.arrive(step);
  arena.waitAllArrived(step, op.wait);
  shmCheckDescriptors(op, op_slot);
  std::vector<size_t> matrix(n * n);  // matrix[i * n + j]: elements rank i sends to rank j
  for (size_t i = 0; i < n; ++i) {
    const auto* theirs = reinterpret_cast<const uint64_t*>(arena.slot(static_cast<int>(i), step));
    for (size_t j = 0; j < n; ++j) matrix[i * n + j] = theirs[j];
  }
  for (size_t i = 0; i < n; ++i) {
    const auto* theirs = reinterpret_cast<const uint64_t*>(arena.slot(static_cast<int>(i), step));
    for (size_t j = 0; j < n; ++j) {
      if (theirs[n + j] != matrix[j * n + i]) {
        throw makeError(ErrorCode::kMismatch, "alltoall split mismatch: ", arena.memberName(static_cast<int>(j)),
                        " sends ", matrix[j * n + i], " elements to ", arena.memberName(static_cast<int>(i)),
                        ", which expects ", theirs[n + j]);
      }
    }
  }

  const size_t piece = op.chunkBytes() / n / elem;
  RONDE_CHECK(piece > 0, "shared-memory chunk too small for " << n << " ranks");
  const size_t largest = *std::max_element(matrix.begin(), matrix.end());
  const size_t rounds = (largest + piece - 1) / piece;
  const std::vector<size_t> send_offsets = blockOffsets(send_counts);
  const std::vector<size_t> recv_offsets = blockOffsets(recv_counts);
  auto pieceCount = [&](size_t total, size_t round) { return pieceInRound(total, round, piece); };
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const size_t self = static_cast<size_t>(me);
  for (size_t k = 0; k < rounds; ++k) {
    step = arena.nextStep();
    char* slot = arena.slot(me, step);
    for (size_t j = 0; j < n; ++j) {
      size_t count = pieceCount(send_counts[j], k);
      if (count > 0) {
        std::memcpy(slot + j * piece * elem, src + (send_offsets[j] + k * piece) * elem, count * elem);
      }
    }
    arena.arrive(step);
    arena.waitAllArrived(step, op.wait);
    for (size_t i = 0; i < n; ++i) {
      size_t count = pieceCount(recv_counts[i], k);
      if (count > 0) {
        std::memcpy(dst + (recv_offsets[i] + k * piece) * elem,
                    arena.slot(static_cast<int>(i), step) + self * piece * elem, count * elem);
      }
    }
  }
}

}  // namespace ronde
