// A shared-memory start-up that fails leaves nothing in /dev/shm and says which rank is to
// blame: a rank with another RONDE_SHM_CHUNK_BYTES, and a rank killed while the others wait
// for it to map the segment. The start timeout is longer than the test's patience, so a
// rank that waits for the deadline instead of noticing is killed by the harness, which is
// also when a segment used to stay behind.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/multiprocess.h"

namespace ronde::testing {
namespace {

using namespace std::chrono_literals;

// Names in /dev/shm of segments made by process `pid` (ronde names them /ronde-<pid>-...).
std::vector<std::string> shmEntriesOf(pid_t pid) {
  std::vector<std::string> found;
  const std::string prefix = "ronde-" + std::to_string(pid) + "-";
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir)) {
      if (std::string(entry->d_name).rfind(prefix, 0) == 0) found.push_back(entry->d_name);
    }
    ::closedir(dir);
  }
  return found;
}

// Kills this process (as a crash would) when it starts waiting for the segment's name.
class DieWaitingForSegmentStore : public Store {
 public:
  explicit DieWaitingForSegmentStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void set(const std::string& key, const Bytes& value) override { inner_->set(key, value); }
  Bytes get(const std::string& key, Duration timeout) override {
    const std::string segment_key = "shm/0";
    if (key.size() >= segment_key.size() &&
        key.compare(key.size() - segment_key.size(), segment_key.size(), segment_key) == 0) {
      ::raise(SIGKILL);
    }
    return inner_->get(key, timeout);
  }
  bool tryGet(const std::string& key, Bytes* value) override { return inner_->tryGet(key, value); }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  void erase(const std::string& key) override { inner_->erase(key); }

 private:
  std::shared_ptr<Store> inner_;
};

struct FailedStart {
  std::vector<ChildOutcome> outcomes;
  pid_t creator = 0;  // local rank 0, whose pid names the segment
};

// Runs 3 ranks on one host whose start-up must fail; `adjust` changes a rank's options.
// Each surviving rank checks that its error holds every one of `expected` (the culprit).
FailedStart runFailingStart(const std::function<void(int rank, CommOptions&)>& adjust,
                            const std::vector<std::string>& expected) {
  RankSpec spec;
  spec.size = 3;
  spec.timeout_seconds = 30;
  int pids[2];
  EXPECT_EQ(::pipe2(pids, O_CLOEXEC | O_NONBLOCK), 0);
  FailedStart result;
  result.outcomes = runProcessesRaw(spec, [&](int rank, int port) {
    if (rank == 0) {
      const pid_t me = ::getpid();
      if (::write(pids[1], &me, sizeof(me)) != sizeof(me)) throw std::runtime_error("pipe");
    }
    CommOptions options;
    options.rank = rank;
    options.size = spec.size;
    options.store = connectStore(spec, port);
    options.timeout = 30s;
    options.start_timeout = 120s;
    adjust(rank, options);
    try {
      Communicator::create(options);
    } catch (const Error& error) {
      const std::string what = error.what();
      for (const std::string& part : expected) {
        if (what.find(part) == std::string::npos) {
          throw std::runtime_error("the error does not say '" + part + "': " + what);
        }
      }
      return;
    }
    throw std::runtime_error("start-up succeeded");
  });
  if (::read(pids[0], &result.creator, sizeof(result.creator)) != sizeof(result.creator)) {
    ADD_FAILURE() << "local rank 0 did not report its pid";
  }
  ::close(pids[0]);
  ::close(pids[1]);
  return result;
}

TEST(ShmStartupFailureTest, ChunkSizeMismatchNamesTheRankAndLeavesNoSegment) {
  FailedStart start = runFailingStart(
      [](int rank, CommOptions& options) {
        options.shm_chunk_bytes = rank == 1 ? 64 * 1024 : 1024 * 1024;
      },
      {"rank 1 (", "RONDE_SHM_CHUNK_BYTES"});
  for (const ChildOutcome& outcome : start.outcomes) {
    EXPECT_EQ(outcome.exit_code, 0) << "rank " << outcome.rank << ": " << outcome.message;
  }
  EXPECT_EQ(shmEntriesOf(start.creator), std::vector<std::string>{});
}

TEST(ShmStartupFailureTest, RankKilledBeforeMappingIsNamedAndLeavesNoSegment) {
  FailedStart start = runFailingStart(
      [](int rank, CommOptions& options) {
        if (rank == 2) options.store = std::make_shared<DieWaitingForSegmentStore>(options.store);
      },
      {"rank 2 (", "died"});
  for (const ChildOutcome& outcome : start.outcomes) {
    if (outcome.rank == 2) {
      EXPECT_EQ(outcome.signal, SIGKILL) << outcome.message;
    } else {
      EXPECT_EQ(outcome.exit_code, 0) << "rank " << outcome.rank << ": " << outcome.message;
    }
  }
  EXPECT_EQ(shmEntriesOf(start.creator), std::vector<std::string>{});
}

}  // namespace
}  // namespace ronde::testing
