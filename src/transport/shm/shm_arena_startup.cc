// Start-up of the shared-memory arena: local rank 0 makes the segment and publishes its name,
// the others map it, and all wait until every local rank has. Whatever happens, the name
// leaves /dev/shm before create() returns or throws. A rank that fails records why, in the
// segment and in the store, before it removes the name, so the others report that first
// failure (naming the rank) instead of an echo of it: "rank 0 died" when rank 0 merely gave
// up because rank 2 died first.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "ronde/errors.h"
#include "transport/shm/shm_arena.h"
#include "transport/shm/shm_arena_layout.h"

namespace ronde {
namespace {

using Clock = Deadline::Clock;

// How often start-up waits look at peers' liveness (a store round trip per missing rank).
constexpr auto kStartCheckInterval = std::chrono::milliseconds(50);

// "/ronde-<pid>-gen<n>-<random>": the pid and generation say whose it is in /dev/shm; the
// random part keeps two communicators of one process and generation apart.
std::string randomSegmentName(int64_t generation) {
  std::random_device device;
  std::mt19937_64 gen((static_cast<uint64_t>(device()) << 32) ^ device() ^
                      static_cast<uint64_t>(::getpid()));
  char name[96];
  std::snprintf(name, sizeof(name), "/ronde-%d-gen%lld-%016llx", static_cast<int>(::getpid()),
                static_cast<long long>(generation), static_cast<unsigned long long>(gen()));
  return name;
}

// Removes the segment's name when start-up ends, however it ends: on success every local
// rank has mapped it, and after a failure nobody will, so it must not stay in /dev/shm.
class NameRemover {
 public:
  NameRemover() = default;
  NameRemover(const NameRemover&) = delete;
  NameRemover& operator=(const NameRemover&) = delete;
  ~NameRemover() {
    if (!name_.empty()) ::shm_unlink(name_.c_str());  // ENOENT if another rank got there first
  }
  void arm(const std::string& name) { name_ = name; }

 private:
  std::string name_;
};

std::string pidKey(const std::string& key, int local_rank) {
  return key + "/pid/" + std::to_string(local_rank);
}

// The pid a local rank published at start-up; 0 while it has not.
int publishedPid(Store& store, const std::string& key, int local_rank) {
  Bytes value;
  if (!store.tryGet(pidKey(key, local_rank), &value)) return 0;
  try {
    return std::stoi(std::string(value.begin(), value.end()));
  } catch (const std::exception&) {
    return 0;
  }
}

bool nameExists(const std::string& name) {
  int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd >= 0) ::close(fd);
  return fd >= 0 || errno != ENOENT;
}

// The first start-up failure on this host, as recorded in the store: "<code>\n<message>".
std::optional<Error> recordedInStore(Store& store, const std::string& key) {
  Bytes value;
  try {
    if (!store.tryGet(key + "/failed", &value)) return std::nullopt;
  } catch (const Error&) {
    return std::nullopt;  // the store went away: the caller's own error stands
  }
  const std::string text(value.begin(), value.end());
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  return Error(static_cast<ErrorCode>(std::atoi(text.c_str())), text.substr(newline + 1));
}

std::optional<Error> recordedInHeader(const ShmArena::Header* header) {
  if (header == nullptr) return std::nullopt;
  if (header->failed_by.load(std::memory_order_acquire) == 0) return std::nullopt;
  return Error(static_cast<ErrorCode>(header->failed_code.load()),
               std::string(header->abort_reason, strnlen(header->abort_reason, kReasonBytes)));
}

// Records this rank's failure where the others look; the first record wins.
void recordFailure(Store& store, const std::string& key, ShmArena::Header* header, int local_rank,
                   const Error& error) {
  if (header != nullptr && header->reason_claimed.exchange(1) == 0) {
    std::snprintf(header->abort_reason, kReasonBytes, "%s", error.what());
    header->failed_code.store(static_cast<int32_t>(error.code()));
    header->failed_by.store(local_rank + 1, std::memory_order_release);
  }
  try {
    if (store.add(key + "/failures", 1) == 1) {
      store.setString(key + "/failed",
                      std::to_string(static_cast<int>(error.code())) + "\n" + error.what());
    }
  } catch (const Error&) {
    // The store is only the second channel; the segment (when mapped) has the record.
  }
}

// Why the segment `header` maps cannot serve these options; empty when it can.
std::string layoutMismatch(const ShmArena::Header& header, size_t mapped_bytes,
                           const ShmArena::Options& options, size_t bytes) {
  const std::string& me = options.member_names[static_cast<size_t>(options.local_rank)];
  const std::string& creator = options.member_names[0];
  if (header.local_size != static_cast<uint32_t>(options.local_size)) {
    return creator + " counts " + std::to_string(header.local_size) + " ranks on this host, " + me +
           " counts " + std::to_string(options.local_size);
  }
  if (header.chunk_bytes != options.chunk_bytes || mapped_bytes < bytes) {
    return "RONDE_SHM_CHUNK_BYTES differs between ranks on this host: " + creator + " uses " +
           std::to_string(header.chunk_bytes) + ", " + me + " uses " +
           std::to_string(options.chunk_bytes);
  }
  return "";
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
  adjusted.member_names.resize(static_cast<size_t>(options.local_size));
  const size_t bytes = segmentBytes(options.local_size, chunk);
  const std::string key = "shm/" + options.host_key;
  // Peers waiting for this rank learn its pid here, so they notice if it dies before mapping.
  store.setString(pidKey(key, options.local_rank), std::to_string(::getpid()));
  NameRemover remover;
  // Both outlive the try block: the failure is recorded in the segment while it is mapped.
  ShmSegment segment;
  std::unique_ptr<ShmArena> arena;
  Header* header = nullptr;  // set once the segment is known to have ronde's layout
  try {
    if (options.local_rank == 0) {
      segment = ShmSegment::create(randomSegmentName(options.generation), bytes);
      remover.arm(segment.name());
      header = new (segment.data()) Header;
      header->magic = kArenaMagic;
      header->local_size = static_cast<uint32_t>(options.local_size);
      header->chunk_bytes = static_cast<uint32_t>(chunk);
      header->attached.store(0);
      header->reason_claimed.store(0);
      header->failed_by.store(0);
      header->failed_code.store(0);
      for (int i = 0; i < options.local_size; ++i) {
        auto* rank_state = new (&header->ranks[i]) RankState;
        rank_state->arrived.store(0);
        rank_state->reduced.store(0);
        rank_state->pid.store(0);
        rank_state->aborted.store(0);
      }
      store.setString(key, segment.name());
    } else {
      const std::string name = waitForName(store, key, adjusted, deadline);
      remover.arm(name);
      segment = mapSegment(store, key, name, adjusted);
      header = reinterpret_cast<Header*>(segment.data());
      const std::string why = layoutMismatch(*header, segment.size(), adjusted, bytes);
      if (!why.empty()) throw Error(ErrorCode::kMismatch, why);
    }
    arena.reset(new ShmArena(std::move(segment), adjusted));
    arena->state(arena->local_rank_).pid.store(static_cast<int32_t>(::getpid()));
    arena->header_->attached.fetch_add(1);
    arena->waitAllMapped(store, key, deadline);
    // Every local rank has mapped it: without its name nothing is left in /dev/shm however
    // the job ends.
    arena->segment_.unlink();
    return arena;
  } catch (const Error& error) {
    recordFailure(store, key, header, options.local_rank, error);
    throw;  // the remover takes the name away
  }
}

// Waits for local rank 0 to publish the segment's name; fails early if it died or gave up.
std::string ShmArena::waitForName(Store& store, const std::string& key, const Options& options,
                                  Deadline deadline) {
  const std::string& creator = options.member_names[0];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at() - Clock::now());
    try {
      return store.getString(key, std::clamp(left, std::chrono::milliseconds(1),
                                             std::chrono::milliseconds(kStartCheckInterval)));
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kTimeout) throw;
    }
    if (auto first = recordedInStore(store, key)) throw *first;
    const int pid = publishedPid(store, key, 0);
    if (pid != 0 && !shmPeerAlive(pid)) {
      throw makeError(ErrorCode::kPeerLost, creator, " died (process ", pid,
                      " is gone) before it made the shared memory of this host");
    }
    if (deadline.expired()) {
      throw makeError(ErrorCode::kTimeout, "timed out waiting for ", creator,
                      " to make the shared memory of this host (start timeout)");
    }
  }
}

// Maps the segment local rank 0 published; only one with ronde's magic is returned.
ShmSegment ShmArena::mapSegment(Store& store, const std::string& key, const std::string& name,
                                const Options& options) {
  const std::string& me = options.member_names[static_cast<size_t>(options.local_rank)];
  const std::string& creator = options.member_names[0];
  ShmSegment segment;
  try {
    segment = ShmSegment::open(name);
  } catch (const Error& error) {
    if (auto first = recordedInStore(store, key)) throw *first;  // it is gone for that reason
    throw makeError(ErrorCode::kPeerLost, me, " cannot map the shared memory that ", creator,
                    " made: ", error.what());
  }
  const auto* header = reinterpret_cast<const Header*>(segment.data());
  if (segment.size() < sizeof(Header) || header->magic != kArenaMagic) {
    throw makeError(ErrorCode::kMismatch, me, " cannot use the shared memory ", name, " made by ",
                    creator, ": another ronde version made it");
  }
  return segment;
}

// Waits until every local rank has mapped the segment. Fails early when one failed (its own
// record says why), died, or gave up unrecorded (the name is gone), and at the deadline.
void ShmArena::waitAllMapped(Store& store, const std::string& key, Deadline deadline) const {
  std::vector<int> pids(static_cast<size_t>(local_size_), 0);
  auto last_check = Clock::time_point{};
  auto allMapped = [&] { return header_->attached.load() >= static_cast<uint32_t>(local_size_); };
  auto throwIfRecorded = [&] {
    if (auto first = recordedInHeader(header_)) throw *first;
  };
  while (!allMapped()) {
    throwIfRecorded();
    const auto now = Clock::now();
    if (now - last_check >= kStartCheckInterval) {
      last_check = now;
      std::string missing;
      for (int i = 0; i < local_size_; ++i) {
        int pid = state(i).pid.load();
        if (i == local_rank_ || pid != 0) continue;  // pid set: that rank has mapped it
        if (!missing.empty()) missing += ", ";
        missing += memberName(i);
        auto& known = pids[static_cast<size_t>(i)];
        if (known == 0) known = publishedPid(store, key, i);
        if (known != 0 && !shmPeerAlive(known)) {
          // It may have mapped, finished its work and exited since its pid was read above:
          // that is a rank done starting, not one that died starting.
          if (state(i).pid.load() != 0) continue;
          throwIfRecorded();  // it failed and exited: its record is the first failure
          throw makeError(ErrorCode::kPeerLost, memberName(i), " died (process ", known,
                          " is gone) before it mapped the shared memory of this host");
        }
      }
      if (!nameExists(segment_.name()) && !allMapped()) {
        throwIfRecorded();
        if (auto first = recordedInStore(store, key)) throw *first;
        throw makeError(ErrorCode::kPeerLost, "the shared memory of this host was removed before ",
                        missing, " mapped it: a rank on this host gave up starting");
      }
      if (deadline.expired()) {
        throw makeError(ErrorCode::kTimeout, "timed out waiting for ", missing,
                        " to map the shared memory of this host (", header_->attached.load(),
                        " of ", local_size_, " did)");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace ronde
