// The forked multi-process harness itself: no thread runs in the test process while it forks
// ranks (a thread alive at fork() leaves its locks held in the child, which hangs sanitized
// builds), and nothing it started outlives the run.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "support/multiprocess.h"

namespace ronde::testing {
namespace {

// The "Threads:" line of /proc/<pid>/status.
int threadsOf(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(MultiprocessHarness, TheTestProcessRunsNoThreadWhileItsRanksRun) {
  RankSpec spec;
  spec.size = 2;
  runRanks(spec, [](Communicator& comm) {
    // The ranks meet first: by then every rank was forked and the store serves them.
    float x = 1.0f;
    comm.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    int threads = threadsOf(::getppid());
    if (threads != 1) {
      throw std::runtime_error("the test process has " + std::to_string(threads) +
                               " threads while it forks ranks");
    }
    if (x != 2.0f) throw std::runtime_error("wrong allreduce result");
  });
  EXPECT_EQ(threadsOf(::getpid()), 1);
}

TEST(MultiprocessHarness, NoChildOutlivesTheRun) {
  RankSpec spec;
  spec.size = 3;
  runRanks(spec, [](Communicator& comm) { comm.barrier(); });
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1) << "a child (the store server?) is still alive";
  EXPECT_EQ(errno, ECHILD);
}

}  // namespace
}  // namespace ronde::testing
