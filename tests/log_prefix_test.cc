// Log lines name the world rank. A sub-communicator's rank is its index in the subset, so its
// construction must not rename the process: after a process set over world ranks {1, 2}, world
// rank 2 used to log as "rank 1" for the rest of the process. A runtime's background thread
// logs as its own world rank even where the process's prefix says otherwise.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "common/logging.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

TEST(LogPrefix, SubCommunicatorLeavesTheWorldRank) {
  RankSpec spec;
  spec.size = 3;
  runRanks(spec, [](Communicator& world) {
    REQUIRE(logPrefix() == rankLogPrefix(world.rank()), "world prefix " << logPrefix());
    if (world.rank() != 0) {
      auto pair = world.subCommunicator({1, 2}, "pair");
      REQUIRE(pair->rank() == world.rank() - 1, "rank in the pair " << pair->rank());
      REQUIRE(logPrefix() == rankLogPrefix(world.rank()),
              "world rank " << world.rank() << " logs as " << logPrefix()
                            << " after joining a sub-communicator");
      int32_t v = world.rank();
      pair->allreduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum);
      REQUIRE(v == 3, "sum over {1, 2}: " << v);
    }
  });
}

TEST(LogPrefix, ProcessSetLeavesTheWorldRank) {
  RankSpec spec;
  spec.size = 3;
  runRuntimeRanks(spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext&) {
    rt->addProcessSet({1, 2});
    REQUIRE(logPrefix() == rankLogPrefix(rt->rank()),
            "world rank " << rt->rank() << " logs as " << logPrefix() << " after a process set");
  });
}

TEST(LogPrefix, AThreadPrefixIsThatThreadsOnly) {
  setLogPrefix(rankLogPrefix(7));
  std::string inside, beside;
  std::thread worker([&] {
    ThreadLogPrefix mine(rankLogPrefix(3));
    inside = logPrefix();
    std::thread other([&] { beside = logPrefix(); });
    other.join();
  });
  worker.join();
  EXPECT_EQ(inside, "[ronde rank 3]");
  EXPECT_EQ(beside, "[ronde rank 7]");
  EXPECT_EQ(logPrefix(), "[ronde rank 7]");
}

}  // namespace
}  // namespace ronde::testing
