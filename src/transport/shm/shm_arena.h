// The shared-memory transport: one segment per host that all local ranks map. Each rank owns
// a double-buffered slot of `chunk_bytes`, and a shared result area serves reductions.
// Ranks move in lock step through numbered steps: a rank publishes "arrived at step s" after
// writing its slot for s, and reads peers' slots once they arrived too. Because slots
// alternate by step parity and every step waits for all ranks, a slot is never overwritten
// while a peer may still read it (see the comments in shm_allreduce.cc).
//
// Waits spin briefly, then yield, then sleep, so oversubscribed hosts still progress; while
// sleeping they check peers' liveness (a dead local rank is reported by rank and host), the
// abort flags of all local ranks, and the deadline.
//
// Thread rule: one thread at a time drives the arena (the communicator's executing thread);
// abort() may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "ronde/store.h"
#include "transport/shm/shm_segment.h"

namespace ronde {

constexpr size_t kDescriptorBytes = 64;

struct ShmWait {
  Deadline deadline = Deadline::never();
  const std::atomic<bool>* aborted = nullptr;  // this process's abort flag
  std::function<std::string()> describe;       // the collective, for error messages
};

class ShmArena {
 public:
  struct Options {
    int local_rank = 0;
    int local_size = 1;
    std::vector<std::string> member_names;  // "rank 3 (host b)" for each local rank
    size_t chunk_bytes = 1024 * 1024;
    std::string host_key;                   // unique per host within the job
    int64_t generation = 0;                 // CommOptions::generation, part of the name
  };

  // Local rank 0 creates the segment and publishes its name in the store; the others map it.
  // Start-up fails early, naming the rank, when a local rank dies before mapping it or finds
  // it made with other settings (RONDE_SHM_CHUNK_BYTES); on every outcome the segment's name
  // is removed from /dev/shm before this returns or throws.
  static std::unique_ptr<ShmArena> create(Store& store, const Options& options, Deadline deadline);
  ~ShmArena();

  int localRank() const { return local_rank_; }
  int localSize() const { return local_size_; }
  size_t chunkBytes() const { return chunk_bytes_; }

  // Steps are numbered from 1; every local rank takes them in the same order.
  uint64_t nextStep() { return ++step_; }
  uint64_t lastStep() const { return step_; }
  // Operations are numbered too: descriptors alternate between two places by their parity.
  uint64_t nextOp() { return ++op_; }

  char* slot(int local_rank, uint64_t step) const;
  char* result(uint64_t step) const;

  void arrive(uint64_t step);
  void waitAllArrived(uint64_t step, const ShmWait& wait) const;
  void markReduced(uint64_t step);
  void waitAllReduced(uint64_t step, const ShmWait& wait) const;

  // Each collective publishes a fixed-size description of its arguments before its first
  // arrive; after the first wait every rank compares all descriptions.
  void publishDescriptor(uint64_t op_index, const void* descriptor);
  const void* descriptor(int local_rank, uint64_t op_index) const;

  // Marks this rank aborted; peers blocked in waits fail with `reason`.
  void abort(const std::string& reason);

  // The process id of a local rank (cross-memory reads of its buffers).
  int pid(int local_rank) const;

  const std::string& memberName(int local_rank) const {
    return member_names_[static_cast<size_t>(local_rank)];
  }

  struct Header;
  struct RankState;

 private:
  ShmArena(ShmSegment segment, const Options& options);
  // Start-up steps (shm_arena_startup.cc).
  static std::string waitForName(Store& store, const std::string& key, const Options& options,
                                 Deadline deadline);
  static ShmSegment mapSegment(Store& store, const std::string& key, const std::string& name,
                               const Options& options);
  void waitAllMapped(Store& store, const std::string& key, Deadline deadline) const;
  RankState& state(int local_rank) const;
  void waitAll(bool reduced, uint64_t step, const ShmWait& wait) const;
  void checkPeers(const ShmWait& wait, int waiting_for, bool reduced, uint64_t step) const;

  ShmSegment segment_;
  Header* header_ = nullptr;
  char* slots_ = nullptr;
  int local_rank_;
  int local_size_;
  size_t chunk_bytes_;
  std::vector<std::string> member_names_;
  uint64_t step_ = 0;
  bool spin_ = true;  // spinning helps only while every local rank has a CPU of its own
  uint64_t op_ = 0;
};

}  // namespace ronde
