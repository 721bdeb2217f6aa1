// The layout of the shared segment, shared by the arena's start-up (shm_arena_startup.cc)
// and its steady state (shm_arena.cc). Every local rank of a job runs the same build, and
// the magic changes with the layout, so a segment made by another version is refused.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/shm/shm_arena.h"

namespace ronde {

constexpr uint64_t kArenaMagic = 0x726f6e6465617232ULL;  // "rondear2"
constexpr size_t kReasonBytes = 1024;

// Each rank writes only its own RankState; peers only read it. One per cache-line group so
// that a rank's counter updates do not invalidate its neighbours' lines.
struct alignas(64) ShmArena::RankState {
  std::atomic<uint64_t> arrived;
  std::atomic<uint64_t> reduced;
  std::atomic<int32_t> pid;  // set once the rank has mapped the segment
  std::atomic<uint32_t> aborted;
  char pad[64 - 24];
  unsigned char descriptors[2][kDescriptorBytes];
};

struct ShmArena::Header {
  uint64_t magic;
  uint32_t local_size;
  uint32_t chunk_bytes;
  std::atomic<uint32_t> attached;
  std::atomic<uint32_t> reason_claimed;  // the first to claim it writes abort_reason
  // Start-up failed: local rank + 1 of the first rank that failed, and its ErrorCode.
  std::atomic<int32_t> failed_by;
  std::atomic<int32_t> failed_code;
  char abort_reason[kReasonBytes];
  RankState ranks[1];  // local_size entries follow
};

inline size_t headerBytes(int local_size) {
  size_t bytes = offsetof(ShmArena::Header, ranks) +
                 sizeof(ShmArena::RankState) * static_cast<size_t>(local_size);
  return (bytes + 4095) / 4096 * 4096;
}

inline size_t segmentBytes(int local_size, size_t chunk) {
  // Two slots per rank plus two result buffers, all double-buffered by step parity.
  return headerBytes(local_size) + (2 * static_cast<size_t>(local_size) + 2) * chunk;
}

// False once `pid` (a local rank) has exited, zombies included; true for pid <= 0.
bool shmPeerAlive(int pid);

}  // namespace ronde
