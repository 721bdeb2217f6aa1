// What every link-based collective algorithm receives: the group it runs over, and the
// context that bounds it (deadline, abort flag, chunking, a description for errors).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "transport/link.h"

namespace ronde {

// A set of ranks joined by links. Member i is reached through links[i]; links[rank] is null.
struct LinkGroup {
  int rank = 0;
  int size = 1;
  std::vector<Link*> links;

  Link* to(int member) const { return links[static_cast<size_t>(member)]; }
  int next(int step = 1) const { return (rank + step) % size; }
  int prev(int step = 1) const { return ((rank - step) % size + size) % size; }
};

struct CollectiveContext {
  Deadline deadline = Deadline::never();
  const std::atomic<bool>* aborted = nullptr;  // set by Communicator::abort from any thread
  size_t chunk_bytes = 512 * 1024;
  // Poll without blocking for a few tens of microseconds before sleeping in poll(): a sleep
  // costs a scheduler wake-up per message. Off when ranks outnumber CPUs.
  bool spin_before_block = false;
  // "allreduce #7 (1024 x float32) on rank 0 (host a)", built only when an error needs it.
  std::function<std::string()> describe;
  std::string what() const { return describe ? describe() : std::string("a collective"); }
};

// One link that a blocked algorithm waits on, for reading and/or writing.
struct LinkInterest {
  Link* link;
  bool read;
  bool write;
};

// Sleeps until one of the links can progress. Throws Error(kTimeout) naming the peers when
// the deadline passes, Error(kAborted) when the communicator was aborted.
void waitForLinks(const LinkInterest* interests, int count, const CollectiveContext& ctx);

// Sends `send_size` bytes to `to` while receiving `recv_size` bytes from `from` (either may
// be null or zero-sized); returns when both are done. Full duplex: no deadlock when two
// ranks exchange with each other.
void exchange(Link* to, const void* send_data, size_t send_size, Link* from, void* recv_data,
              size_t recv_size, const CollectiveContext& ctx);

}  // namespace ronde
