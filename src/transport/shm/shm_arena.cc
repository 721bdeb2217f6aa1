#include "transport/shm/shm_arena.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RONDE_CPU_RELAX() _mm_pause()
#else
#define RONDE_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

#include "ronde/errors.h"
#include "transport/shm/shm_arena_layout.h"

namespace ronde {

bool shmPeerAlive(int pid) {
  if (pid <= 0) return true;  // not attached yet: nothing to say
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A killed child that its parent has not reaped yet is a zombie: dead all the same.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

ShmArena::ShmArena(ShmSegment segment, const Options& options)
    : segment_(std::move(segment)),
      local_rank_(options.local_rank),
      local_size_(options.local_size),
      chunk_bytes_(options.chunk_bytes),
      member_names_(options.member_names) {
  header_ = reinterpret_cast<Header*>(segment_.data());
  slots_ = segment_.data() + headerBytes(local_size_);
  member_names_.resize(static_cast<size_t>(local_size_));
  // Online CPUs, not this process's affinity: launchers bind each rank to its own core.
  spin_ = local_size_ <= static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
}

ShmArena::~ShmArena() { segment_.unlink(); }

ShmArena::RankState& ShmArena::state(int local_rank) const { return header_->ranks[local_rank]; }

int ShmArena::pid(int local_rank) const {
  return state(local_rank).pid.load(std::memory_order_acquire);
}

char* ShmArena::slot(int local_rank, uint64_t step) const {
  size_t index = static_cast<size_t>(local_rank) * 2 + (step & 1);
  return slots_ + index * chunk_bytes_;
}

char* ShmArena::result(uint64_t step) const {
  size_t index = static_cast<size_t>(local_size_) * 2 + (step & 1);
  return slots_ + index * chunk_bytes_;
}

void ShmArena::arrive(uint64_t step) {
  state(local_rank_).arrived.store(step, std::memory_order_release);
}

void ShmArena::markReduced(uint64_t step) {
  state(local_rank_).reduced.store(step, std::memory_order_release);
}

void ShmArena::waitAllArrived(uint64_t step, const ShmWait& wait) const { waitAll(false, step, wait); }

void ShmArena::waitAllReduced(uint64_t step, const ShmWait& wait) const { waitAll(true, step, wait); }

void ShmArena::waitAll(bool reduced, uint64_t step, const ShmWait& wait) const {
  int next = 0;
  uint64_t polls = 0;
  auto spin_since = Deadline::Clock::time_point{};
  auto slow_since = Deadline::Clock::time_point{};
  auto last_check = Deadline::Clock::time_point{};
  while (next < local_size_) {
    const RankState& peer = state(next);
    uint64_t value = reduced ? peer.reduced.load(std::memory_order_acquire)
                             : peer.arrived.load(std::memory_order_acquire);
    if (value >= step) {
      ++next;
      continue;
    }
    ++polls;
    // Spin about 10 us (pause is ~40 ns on some cores, so count time, not iterations);
    // never when local ranks outnumber the CPUs: the awaited peer may need this one.
    if (spin_ && (polls & 63) != 0) {
      RONDE_CPU_RELAX();
      continue;
    }
    auto now = Deadline::Clock::now();
    if (spin_ && spin_since == Deadline::Clock::time_point{}) spin_since = now;
    if (spin_ && now - spin_since < std::chrono::microseconds(10)) continue;
    // Past the spin budget: give the core away (a peer may share it), then sleep.
    if (slow_since == Deadline::Clock::time_point{}) slow_since = now;
    if (now - slow_since < std::chrono::milliseconds(2)) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (now - last_check >= std::chrono::milliseconds(20)) {
      last_check = now;
      checkPeers(wait, next, reduced, step);
    }
  }
}

void ShmArena::checkPeers(const ShmWait& wait, int waiting_for, bool reduced, uint64_t step) const {
  // A step every rank has reached is done, even if one of them aborted right after it: a rank
  // aborts only after its arrival (release), so an abort seen here shows that arrival too.
  bool complete = true;
  for (int i = waiting_for; i < local_size_ && complete; ++i) {
    complete = (reduced ? state(i).reduced.load(std::memory_order_acquire)
                        : state(i).arrived.load(std::memory_order_acquire)) >= step;
  }
  if (complete) return;
  const std::string what = wait.describe ? wait.describe() : std::string("a shared-memory collective");
  for (int i = 0; i < local_size_; ++i) {
    if (state(i).aborted.load(std::memory_order_acquire) != 0) {
      std::string reason(header_->abort_reason, strnlen(header_->abort_reason, kReasonBytes));
      throw makeError(i == local_rank_ ? ErrorCode::kAborted : ErrorCode::kPeerLost, what,
                      " failed: ", memberName(i), " aborted: ", reason);
    }
  }
  if (wait.aborted && wait.aborted->load()) {
    throw makeError(ErrorCode::kAborted, what, " was aborted");
  }
  auto reached = [&](int i) {
    return reduced ? state(i).reduced.load(std::memory_order_acquire)
                   : state(i).arrived.load(std::memory_order_acquire);
  };
  for (int i = 0; i < local_size_; ++i) {
    // A peer that finished its part of this step and then exited is not a failure: what
    // it left in shared memory stays readable while this rank maps it. Its counter is read
    // again once it is known dead, since it may have arrived and exited between the first
    // read and the liveness check; a dead process cannot move it after that.
    if (i != local_rank_ && reached(i) < step && !shmPeerAlive(state(i).pid.load()) &&
        reached(i) < step) {
      throw makeError(ErrorCode::kPeerLost, what, " failed: ", memberName(i),
                      " died (process ", state(i).pid.load(), " is gone)");
    }
  }
  if (wait.deadline.expired()) {
    throw makeError(ErrorCode::kTimeout, what, " timed out waiting for ", memberName(waiting_for),
                    " (is that rank still calling the same collectives?)");
  }
}

void ShmArena::publishDescriptor(uint64_t op_index, const void* descriptor) {
  std::memcpy(state(local_rank_).descriptors[op_index & 1], descriptor, kDescriptorBytes);
}

const void* ShmArena::descriptor(int local_rank, uint64_t op_index) const {
  return state(local_rank).descriptors[op_index & 1];
}

void ShmArena::abort(const std::string& reason) {
  if (header_->reason_claimed.exchange(1) == 0) {
    std::snprintf(header_->abort_reason, kReasonBytes, "%s", reason.c_str());
  }
  state(local_rank_).aborted.store(1, std::memory_order_release);
}

}  // namespace ronde
