// Shutdown then init, again and again, in the same processes, against one store as `ronde run`
// serves it: each init is a new generation (gen/<n>/ in the store), and nothing of an older
// one may be read, reused or left behind: keys, shm segments, descriptors, threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ronde/runtime.h"
#include "ronde/store.h"
#include "support/multiprocess.h"
#include "support/process_census.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

constexpr const char* kSecret = "reinit-secret";

// What `ronde run` hands a worker (src/launcher/worker_env.cc), plus quick test settings.
void setLauncherEnvironment(int rank, int size, int port, const std::string& transport) {
  auto set = [](const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); };
  set("RONDE_RANK", std::to_string(rank));
  set("RONDE_SIZE", std::to_string(size));
  set("RONDE_LOCAL_RANK", std::to_string(rank));
  set("RONDE_LOCAL_SIZE", std::to_string(size));
  set("RONDE_CROSS_RANK", "0");
  set("RONDE_CROSS_SIZE", "1");
  set("RONDE_STORE_ADDRESS", "127.0.0.1:" + std::to_string(port));
  set("RONDE_SECRET", kSecret);
  set("RONDE_TRANSPORT", transport);
  set("RONDE_CYCLE_TIME", "1");
  set("RONDE_STALL_CHECK_DISABLE", "1");
  set("RONDE_TIMEOUT_SECONDS", "60");
  set("RONDE_START_TIMEOUT", "30");
}

// This process's open descriptors, each with what it points at (for the failure message).
std::set<std::string> openDescriptors() {
  std::set<std::string> fds;
  for (const std::string& fd : directoryEntries("/proc/self/fd")) {
    char target[512] = {};
    ssize_t n = ::readlink(("/proc/self/fd/" + fd).c_str(), target, sizeof(target) - 1);
    fds.insert(fd + " -> " + (n > 0 ? std::string(target, static_cast<size_t>(n)) : "?"));
  }
  // The listing itself held one descriptor open: drop it (its target names the directory).
  for (auto it = fds.begin(); it != fds.end();) {
    it = it->find("/proc/") != std::string::npos && it->find("/fd") != std::string::npos
             ? fds.erase(it)
             : std::next(it);
  }
  return fds;
}

// The shm segments this process has mapped (they show as /dev/shm/<name> in its maps).
std::vector<std::string> mappedSegments() {
  std::vector<std::string> segments;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    size_t at = line.find("/dev/shm/ronde-");
    if (at != std::string::npos) segments.push_back(line.substr(at));
  }
  return segments;
}

// Names in /dev/shm made by these pids (a segment is named after the local rank 0 that made it).
std::vector<std::string> segmentNamesOf(const std::vector<int>& pids) {
  std::vector<std::string> found;
  for (const std::string& name : directoryEntries("/dev/shm")) {
    for (int pid : pids) {
      if (name.rfind("ronde-" + std::to_string(pid) + "-", 0) == 0) found.push_back(name);
    }
  }
  return found;
}

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

std::string difference(const std::set<std::string>& after, const std::set<std::string>& before) {
  std::vector<std::string> extra;
  for (const std::string& item : after) {
    if (before.count(item) == 0) extra.push_back(item);
  }
  return joined(extra);
}

std::shared_ptr<HostTensor> filledInts(size_t n, int32_t value) {
  auto t =
      std::make_shared<HostTensor>(DataType::kInt32, std::vector<int64_t>{static_cast<int64_t>(n)});
  for (size_t i = 0; i < n; ++i) t->as<int32_t>()[i] = value + static_cast<int32_t>(i);
  return t;
}

// One init..shutdown cycle: an allreduce whose result depends on the cycle, so a value left
// over from another generation cannot pass.
void runOneGeneration(int rank, int size, int cycle, bool shm) {
  auto rt = Runtime::init();
  REQUIRE(rt->rank() == rank && rt->size() == size,
          "cycle " << cycle << ": init gave rank " << rt->rank() << " of " << rt->size());
  if (shm) {
    // The arenas of generation n are named with it (gen<n>), so no two generations share one:
    // two of them, the world's data communicator and the runtime's control communicator.
    const std::string tag = "-gen" + std::to_string(cycle) + "-";
    const auto segments = mappedSegments();
    const bool tagged = std::all_of(segments.begin(), segments.end(), [&](const std::string& s) {
      return s.find(tag) != std::string::npos;
    });
    REQUIRE(segments.size() == 2 && tagged, "cycle " << cycle
                                                     << ": expected two mapped segments tagged "
                                                     << tag << ", found " << joined(segments));
  }
  constexpr size_t kCount = 33;
  auto t = filledInts(kCount, 1000 * rank + cycle);
  Request request;
  request.kind = RequestKind::kAllreduce;
  request.name = "reinit.x";
  request.input = t;
  request.output = t;
  request.op = ReduceOp::kSum;
  rt->enqueue(request)->wait(std::chrono::seconds(60));
  for (size_t i = 0; i < kCount; ++i) {
    // sum over r of (1000 r + cycle + i)
    const int32_t expected = 1000 * size * (size - 1) / 2 + size * (cycle + static_cast<int>(i));
    REQUIRE(t->as<int32_t>()[i] == expected, "cycle " << cycle << ": element " << i << " is "
                                                      << t->as<int32_t>()[i] << ", expected "
                                                      << expected);
  }
  rt->shutdown();
  REQUIRE(!rt->isInitialized(), "cycle " << cycle << ": still initialised after shutdown");
  rt.reset();
  REQUIRE(mappedSegments().empty(),
          "cycle " << cycle << ": shm still mapped after shutdown: " << joined(mappedSegments()));
  REQUIRE(segmentNamesOf({::getpid()}).empty(),
          "cycle " << cycle << ": left in /dev/shm: " << joined(segmentNamesOf({::getpid()})));
}

void runCycles(int size, const std::string& transport, int cycles) {
  RankSpec spec;
  spec.size = size;
  spec.secret = kSecret;
  spec.timeout_seconds = 240;
  auto outcomes = runProcessesRaw(spec, [&](int rank, int port) {
    setLauncherEnvironment(rank, size, port, transport);
    const auto fds_before = openDescriptors();
    const size_t threads_before = threadCount();
    for (int cycle = 1; cycle <= cycles; ++cycle) {
      runOneGeneration(rank, size, cycle, transport == "shm");
      const size_t threads = settledThreadCount(threads_before);
      REQUIRE(threads == threads_before, "cycle " << cycle << ": " << threads
                                                  << " threads after shutdown, " << threads_before
                                                  << " before the first init");
    }
    const auto fds_after = openDescriptors();
    REQUIRE(fds_after == fds_before,
            cycles << " cycles leaked descriptors: " << difference(fds_after, fds_before));
    // The store counted each of this rank's inits: one generation per cycle.
    auto store = makeTcpStore("127.0.0.1", port, kSecret, std::chrono::seconds(10));
    const int64_t generations = store->add("generation/rank" + std::to_string(rank), 0);
    REQUIRE(generations == cycles, "the store counted " << generations << " generations");
  });
  for (const ChildOutcome& outcome : outcomes) {
    EXPECT_EQ(outcome.exit_code, 0) << "rank " << outcome.rank << " of " << size << " ("
                                    << transport << ") failed: " << outcome.message;
  }
}

// Over TCP a peer learns why the job failed from the store's abort reason (a closed socket
// says nothing): each generation must read its own, not the first one the job ever wrote.
TEST(RuntimeReinit, AbortReasonOfAnEarlierGenerationIsNotSeenByTheNext) {
  RankSpec spec;
  spec.size = 2;
  spec.secret = kSecret;
  auto outcomes = runProcessesRaw(spec, [&](int rank, int port) {
    setLauncherEnvironment(rank, 2, port, "tcp");
    for (const std::string reason : {"failure of the first generation", "failure of the second"}) {
      if (rank == 0) {
        auto rt = Runtime::init();
        rt->communicator().abort(reason);
        rt->shutdown();
        continue;
      }
      std::string seen;
      try {
        auto rt = Runtime::init();
        auto t = filledInts(4, 1);
        Request request;
        request.name = "reinit.aborted";
        request.input = t;
        request.output = t;
        rt->enqueue(request)->wait(std::chrono::seconds(60));
        rt->shutdown();
      } catch (const Error& e) {
        seen = e.what();
      }
      REQUIRE(seen.find(reason) != std::string::npos,
              "rank 1 expected the reason '" << reason << "', got: '" << seen << "'");
    }
  });
  for (const ChildOutcome& outcome : outcomes) {
    EXPECT_EQ(outcome.exit_code, 0) << "rank " << outcome.rank << " failed: " << outcome.message;
  }
}

// Under mpirun rank 0 serves a new store at every init and leaves its port in a file named
// after the job: a rank quick to come back must never find the port of the previous init.
TEST(RuntimeReinit, CommunicatorsUnderMpirunReinitAgainAndAgain) {
  RankSpec spec;
  spec.size = 2;
  const std::string job = "reinit-test-" + std::to_string(::getpid());
  auto outcomes = runProcessesRaw(spec, [&](int rank, int) {
    ::setenv("OMPI_COMM_WORLD_RANK", std::to_string(rank).c_str(), 1);
    ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    ::setenv("OMPI_MCA_ess_base_jobid", job.c_str(), 1);
    ::setenv("RONDE_START_TIMEOUT", "30", 1);
    ::setenv("RONDE_TIMEOUT_SECONDS", "60", 1);
    for (int cycle = 1; cycle <= 200; ++cycle) {
      auto comm = Communicator::fromEnvironment();
      int32_t value = 10 * rank + cycle;
      comm->allreduce(&value, &value, 1, DataType::kInt32, ReduceOp::kSum);
      REQUIRE(value == 10 + 2 * cycle, "cycle " << cycle << ": sum " << value);
    }
  });
  for (const ChildOutcome& outcome : outcomes) {
    EXPECT_EQ(outcome.exit_code, 0) << "rank " << outcome.rank << " failed: " << outcome.message;
  }
  EXPECT_TRUE(directoryEntries("/tmp/ronde-" + job).empty()) << "the port file stayed behind";
}

TEST(RuntimeReinit, TwoRanksShm200Cycles) { runCycles(2, "shm", 200); }
TEST(RuntimeReinit, ThreeRanksShm200Cycles) { runCycles(3, "shm", 200); }
TEST(RuntimeReinit, TwoRanksTcp200Cycles) { runCycles(2, "tcp", 200); }
TEST(RuntimeReinit, ThreeRanksTcp200Cycles) { runCycles(3, "tcp", 200); }

}  // namespace
}  // namespace ronde::testing
