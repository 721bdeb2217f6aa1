#include "transport/shm/shm_arena.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RONDE_CPU_RELAX() _mm_pause()
#else
#define RONDE_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

#include "ronde/errors.h"

namespace ronde {

constexpr uint64_t kArenaMagic = 0x726f6e6465617231ULL;  // "rondear1"
constexpr size_t kReasonBytes = 1024;

// Each rank writes only its own RankState; peers only read it. One per cache-line group so
// that a rank's counter updates do not invalidate its neighbours' lines.
struct alignas(64) ShmArena::RankState {
  std::atomic<uint64_t> arrived;
  std::atomic<uint64_t> reduced;
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> aborted;
  char pad[64 - 24];
  unsigned char descriptors[2][kDescriptorBytes];
};

struct ShmArena::Header {
  uint64_t magic;
  uint32_t local_size;
  uint32_t chunk_bytes;
  std::atomic<uint32_t> attached;
  std::atomic<uint32_t> reason_claimed;
  char abort_reason[kReasonBytes];
  RankState ranks[1];  // local_size entries follow
};

namespace {

size_t headerBytes(int local_size) {
  size_t bytes = offsetof(ShmArena::Header, ranks) +
                 sizeof(ShmArena::RankState) * static_cast<size_t>(local_size);
  return (bytes + 4095) / 4096 * 4096;
}

size_t segmentBytes(int local_size, size_t chunk) {
  // Two slots per rank plus two result buffers, all double-buffered by step parity.
  return headerBytes(local_size) + (2 * static_cast<size_t>(local_size) + 2) * chunk;
}

std::string randomSegmentName() {
  std::random_device device;
  std::mt19937_64 gen((static_cast<uint64_t>(device()) << 32) ^ device() ^
                      static_cast<uint64_t>(::getpid()));
  char name[64];
  std::snprintf(name, sizeof(name), "/ronde-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(gen()));
  return name;
}

bool processAlive(int pid) {
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

}  // namespace

std::unique_ptr<ShmArena> ShmArena::create(Store& store, const Options& options,
                                           Deadline deadline) {
  size_t chunk = (options.chunk_bytes + 63) / 64 * 64;
  if (chunk == 0 || chunk > (1u << 30)) {
    throw makeError(ErrorCode::kConfig, "shared-memory chunk of ", options.chunk_bytes,
                    " bytes is out of range");
  }
  Options adjusted = options;
  adjusted.chunk_bytes = chunk;
  const size_t bytes = segmentBytes(options.local_size, chunk);
  const std::string key = "shm/" + options.host_key;
  ShmSegment segment;
  if (options.local_rank == 0) {
    segment = ShmSegment::create(randomSegmentName(), bytes);
    auto* header = new (segment.data()) Header;
    header->magic = kArenaMagic;
    header->local_size = static_cast<uint32_t>(options.local_size);
    header->chunk_bytes = static_cast<uint32_t>(chunk);
    header->attached.store(0);
    header->reason_claimed.store(0);
    for (int i = 0; i < options.local_size; ++i) {
      auto* rank_state = new (&header->ranks[i]) RankState;
      rank_state->arrived.store(0);
      rank_state->reduced.store(0);
      rank_state->pid.store(0);
      rank_state->aborted.store(0);
    }
    store.setString(key, segment.name());
  } else {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at() -
                                                                     Deadline::Clock::now());
    std::string name = store.getString(key, std::max(left, std::chrono::milliseconds(1)));
    segment = ShmSegment::open(name, bytes);
    auto* header = reinterpret_cast<Header*>(segment.data());
    if (header->magic != kArenaMagic || header->local_size != static_cast<uint32_t>(options.local_size) ||
        header->chunk_bytes != chunk) {
      throw makeError(ErrorCode::kMismatch, "shared memory ", name,
                      " was made for another configuration (local size or RONDE_SHM_CHUNK_BYTES"
                      " differ between ranks on this host)");
    }
  }
  std::unique_ptr<ShmArena> arena(new ShmArena(std::move(segment), adjusted));
  arena->state(arena->local_rank_).pid.store(static_cast<int32_t>(::getpid()));
  arena->header_->attached.fetch_add(1);
  // Once every local rank has mapped the segment its name is no longer needed: removing it
  // now means that nothing is left in /dev/shm however the job ends.
  while (arena->header_->attached.load() < static_cast<uint32_t>(options.local_size)) {
    if (deadline.expired()) {
      arena->segment_.unlink();
      throw makeError(ErrorCode::kTimeout, "timed out waiting for the ranks on this host to map ",
                      "shared memory: ", arena->header_->attached.load(), " of ",
                      options.local_size, " arrived");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  arena->segment_.unlink();
  return arena;
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
  for (int i = 0; i < local_size_; ++i) {
    // A peer that finished its part of this step and then exited is not a failure: what
    // it left in shared memory stays readable while this rank maps it.
    uint64_t reached = reduced ? state(i).reduced.load(std::memory_order_acquire)
                               : state(i).arrived.load(std::memory_order_acquire);
    if (i != local_rank_ && reached < step && !processAlive(state(i).pid.load())) {
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
