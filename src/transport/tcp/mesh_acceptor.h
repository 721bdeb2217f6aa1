// The listening half of the TCP mesh: accepts connections until every higher rank is in.
// All pending connections run the job-secret handshake and the greeting at once in one poll
// loop, each within its own timeout, so a stranger on the port (silent, closing early,
// sending garbage, or without the secret) is dropped and logged without delaying the real
// peers or failing the rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "transport/link.h"

namespace ronde {

// What a connecting rank sends once the secret is proven: who it is.
struct MeshHello {
  static constexpr uint32_t kMagic = 0x524e4431;  // "RND1"
  uint32_t magic;
  int32_t rank;
};

struct MeshAcceptorOptions {
  int rank = 0;
  int size = 1;
  std::string secret;
  std::vector<std::string> names;  // "rank 3 (host b)" for every rank
  // A connection gets this long to prove the secret and greet; strangers then make room.
  std::chrono::milliseconds handshake_timeout{10000};
  size_t max_pending = 64;  // unproven connections held at once; the oldest makes room
};

// Returns links to every rank above options.rank (entries below stay null). Throws
// Error(kTimeout) naming the ranks that never connected, or Error(kIo) if the listening
// socket fails or is shut down (how the caller cancels it).
std::vector<std::unique_ptr<Link>> acceptMeshPeers(int listen_fd,
                                                   const MeshAcceptorOptions& options,
                                                   Deadline deadline);

}  // namespace ronde
