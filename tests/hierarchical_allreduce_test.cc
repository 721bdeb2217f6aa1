// The pipelined hierarchical allreduce (src/collectives/hierarchical_allreduce.cc) on simulated
// hosts of two ranks: every dtype and op, counts around the chunk boundaries (down to chunks
// with empty blocks), large buffers with scaling, chunks changed between calls, and a rank
// killed while chunks are in flight. Results are checked against reference.h.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "support/collective_checks.h"
#include "support/multiprocess.h"
#include "support/reference.h"
#include "support/simulated_hosts.h"

namespace ronde::testing {
namespace {

class HierarchicalAllreduceTest : public ::testing::TestWithParam<HostLayout> {
 protected:
  RankSpec spec() const { return simulatedHostsSpec(GetParam()); }
};

// Every rank sets the same knobs before the first collective.
void setHierarchicalChunk(Communicator& comm, int64_t bytes) {
  CommTuning t = comm.tuning();
  t.hierarchical_chunk_bytes = bytes;
  comm.setTuning(t);
  if (comm.transportName() != "shm+tcp (hierarchical)") {
    throw std::runtime_error("expected the hierarchical allreduce, got " + comm.transportName());
  }
}

void checkOne(Communicator& comm, DataType type, ReduceOp op, size_t count, bool in_place) {
  std::vector<char> in(std::max<size_t>(1, count * sizeOf(type)));
  for (size_t i = 0; i < count; ++i)
    storeValue(type, in.data(), i, inputValue(type, comm.rank(), i));
  std::vector<char> out(in.size());
  char* result = in_place ? in.data() : out.data();
  comm.allreduce(in.data(), result, count, type, op);
  for (size_t i = 0; i < count; ++i) {
    const double want = expectedReduction(type, op, comm.size(), i);
    const double got = loadValue(type, result, i);
    if (!near(type, op, got, want)) {
      throw std::runtime_error(std::string(dataTypeName(type)) + "/" + reduceOpName(op) + "/" +
                               std::to_string(count) + (in_place ? " in place" : "") + " element " +
                               std::to_string(i) + ": got " + std::to_string(got) + ", want " +
                               std::to_string(want));
    }
  }
}

// A 4 KiB chunk holds 4096 / size(dtype) elements (whole cache lines per local rank): the
// counts below give one chunk, a chunk and one element (whose last chunk leaves the second
// local rank nothing), and many uneven chunks.
TEST_P(HierarchicalAllreduceTest, EveryDtypeAndOpAroundChunkBoundaries) {
  runRanks(spec(), [](Communicator& comm) {
    setHierarchicalChunk(comm, 4096);
    for (DataType type : allDataTypes()) {
      const size_t per_chunk = 4096 / sizeOf(type);
      for (ReduceOp op : allReduceOps()) {
        if (type == DataType::kBool && op == ReduceOp::kAverage) continue;
        for (size_t count :
             {size_t{0}, size_t{1}, size_t{3}, per_chunk, per_chunk + 1, 5 * per_chunk + 77}) {
          checkOne(comm, type, op, count, count % 2 == 1);
        }
      }
    }
  });
}

// Large buffers with pre- and post-scaling through many chunks, then through the default.
TEST_P(HierarchicalAllreduceTest, LargeBuffersWithScaling) {
  runRanks(spec(), [](Communicator& comm) {
    setHierarchicalChunk(comm, 1 << 20);
    checkAllreduceLargeBuffersAndScaling(comm);
    checkAllreduceLargeUnscaled(comm);
  });
}

// The chunk may change between collectives (the autotuner does): odd sizes, not whole pages.
TEST_P(HierarchicalAllreduceTest, ChunkChangesBetweenCalls) {
  runRanks(spec(), [](Communicator& comm) {
    for (int64_t chunk : {4096, 100003, 1 << 20, 4097}) {
      setHierarchicalChunk(comm, chunk);
      checkOne(comm, DataType::kFloat32, ReduceOp::kSum, 300001, true);
      checkOne(comm, DataType::kInt32, ReduceOp::kMax, 70001, false);
    }
  });
}

TEST_P(HierarchicalAllreduceTest, RejectsAChunkBelowAPage) {
  runRanks(spec(), [](Communicator& comm) {
    CommTuning t = comm.tuning();
    t.hierarchical_chunk_bytes = 100;
    try {
      comm.setTuning(t);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument ||
          std::string(e.what()).find("hierarchical chunk") == std::string::npos) {
        throw std::runtime_error(std::string("unexpected error: ") + e.what());
      }
      checkOne(comm, DataType::kFloat32, ReduceOp::kSum, 5000, false);  // still usable
      return;
    }
    throw std::runtime_error("a 100-byte chunk was accepted");
  });
}

// The last host's first rank dies while 64 chunks of a 16 MiB allreduce are in flight:
// every other rank fails with kPeerLost naming it and its host, well within the timeout.
TEST_P(HierarchicalAllreduceTest, PeerLostMidPipelineIsNamed) {
  const RankSpec s = spec();
  std::vector<float> data(4 * 1024 * 1024, 1.0f);
  expectKilledRankNamed(
      s, s.size - 2, [](Communicator& comm) { setHierarchicalChunk(comm, 256 * 1024); },
      [&](Communicator& comm) {
        comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
      });
}

INSTANTIATE_TEST_SUITE_P(
    Hosts, HierarchicalAllreduceTest,
    ::testing::Values(HostLayout{"hosts_2x2", {"hostA", "hostA", "hostB", "hostB"}},
                      HostLayout{"hosts_3x2",
                                 {"hostA", "hostA", "hostB", "hostB", "hostC", "hostC"}}),
    [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace ronde::testing
