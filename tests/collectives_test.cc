// Every collective x dtype x op x world size x size, on both transports and on simulated
// hosts, in real processes, each result checked against an independent reference.
#include <gtest/gtest.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "support/collective_checks.h"
#include "support/multiprocess.h"

namespace ronde::testing {
namespace {

struct Layout {
  std::string label;
  TransportKind transport;
  std::vector<std::string> hosts;  // empty: one host
  int size;
};

std::string layoutName(const ::testing::TestParamInfo<Layout>& info) { return info.param.label; }

class CollectivesTest : public ::testing::TestWithParam<Layout> {
 protected:
  RankSpec spec() const {
    RankSpec s;
    s.size = GetParam().size;
    s.transport = GetParam().transport;
    s.hosts = GetParam().hosts;
    s.timeout_seconds = 300;
    s.shm_chunk_bytes = 64 * 1024;  // small chunks: many pipeline rounds even for small tests
    return s;
  }
};

TEST_P(CollectivesTest, AllreduceEveryDtypeOpAndSize) {
  runRanks(spec(), checkAllreduceEveryDtypeOpAndSize);
}

TEST_P(CollectivesTest, AllreduceLargeBuffersAndScaling) {
  runRanks(spec(), checkAllreduceLargeBuffersAndScaling);
}

// Without a prescale, shared memory reduces each rank's own share straight from its input
// (never copied into its slot): in place and not, every element against the reference.
TEST_P(CollectivesTest, AllreduceLargeUnscaledReducesOwnShareFromTheInput) {
  runRanks(spec(), checkAllreduceLargeUnscaled);
}

// A communicator whose host has fewer cores than ranks starts staging (with cores enough it
// times both and takes the faster); the direct path must still be exact where the autotuner
// (or a user) switches it on, and staging wherever it is chosen.
TEST_P(CollectivesTest, AllreduceLargeUnscaledWithDirectReadsOnAndOff) {
  runRanks(spec(), [](Communicator& comm) {
    const bool own_cores = comm.localSize() <= static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
    if (!own_cores && comm.tuning().shm_direct_read) {
      throw std::runtime_error("direct reads start on with " + std::to_string(comm.localSize()) +
                               " local ranks on fewer cores");
    }
    for (bool direct : {true, false}) {
      CommTuning tuning = comm.tuning();
      tuning.shm_direct_read = direct;
      comm.setTuning(tuning);
      checkAllreduceLargeUnscaled(comm);
    }
  });
}

TEST_P(CollectivesTest, AllgathervUnevenCounts) { runRanks(spec(), checkAllgathervUnevenCounts); }

TEST_P(CollectivesTest, BroadcastFromEveryRoot) { runRanks(spec(), checkBroadcastFromEveryRoot); }

TEST_P(CollectivesTest, AlltoallvWithSplits) { runRanks(spec(), checkAlltoallvWithSplits); }

TEST_P(CollectivesTest, ReducescatterUneven) { runRanks(spec(), checkReducescatterUneven); }

TEST_P(CollectivesTest, BarrierAndAsyncInOrder) { runRanks(spec(), checkBarrierAndAsyncInOrder); }

std::vector<Layout> layouts() {
  std::vector<Layout> all;
  for (int n = 1; n <= 4; ++n) {
    all.push_back({"shm_" + std::to_string(n), TransportKind::kAuto, {}, n});
  }
  for (int n = 2; n <= 4; ++n) {
    all.push_back({"tcp_" + std::to_string(n), TransportKind::kTcp, {}, n});
  }
  // Two simulated hosts of two ranks: shared memory inside, TCP across (hierarchical).
  all.push_back({"hosts_2x2", TransportKind::kAuto, {"hostA", "hostA", "hostB", "hostB"}, 4});
  // Uneven hosts: flat ring across all ranks.
  all.push_back({"hosts_2_1", TransportKind::kAuto, {"hostA", "hostA", "hostB"}, 3});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Layouts, CollectivesTest, ::testing::ValuesIn(layouts()), layoutName);

}  // namespace
}  // namespace ronde::testing
