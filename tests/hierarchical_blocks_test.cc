// The hierarchical allgather and reduce-scatter (src/collectives/hierarchical_blocks.h) on
// simulated hosts: every dtype (and op), counts that leave ranks empty and blocks that end
// mid-chunk, hosts whose ranks are not numbered one after the other, chunks changed between
// calls, agreement with the flat ring, a mismatch, and a rank killed while chunks are in
// flight. Results are checked against reference.h, whose values differ from rank to rank, so
// a block put in another rank's place is caught.
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/collective_checks.h"
#include "support/multiprocess.h"
#include "support/reference.h"
#include "support/simulated_hosts.h"

namespace ronde::testing {
namespace {

class HierarchicalAllgatherTest : public ::testing::TestWithParam<HostLayout> {
 protected:
  RankSpec spec() const { return simulatedHostsSpec(GetParam()); }
};

// Every rank sets the same knobs before the next collective.
void setHierarchical(Communicator& comm, bool on, int64_t chunk_bytes) {
  CommTuning t = comm.tuning();
  t.hierarchical_allgather = on;
  t.hierarchical_chunk_bytes = chunk_bytes;
  comm.setTuning(t);
}

// Allgathers counts[r] elements from every rank r and checks every block against rank r's
// input. In place: this rank's input already sits in its block of the output.
void checkGather(Communicator& comm, DataType type, const std::vector<size_t>& counts,
                 bool in_place, int salt = 0) {
  const size_t elem = sizeOf(type);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t me = static_cast<size_t>(comm.rank());
  const size_t my_offset =
      std::accumulate(counts.begin(), counts.begin() + comm.rank(), size_t{0});
  std::vector<char> out(std::max<size_t>(1, total * elem), 0x5a);
  std::vector<char> in(std::max<size_t>(1, counts[me] * elem));
  for (size_t i = 0; i < counts[me]; ++i)
    storeValue(type, in.data(), i, inputValue(type, comm.rank(), i, salt));
  const void* source = in.data();
  if (in_place) {
    std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(counts[me] * elem),
              out.begin() + static_cast<std::ptrdiff_t>(my_offset * elem));
    source = out.data() + my_offset * elem;
  }
  comm.allgatherv(source, out.data(), counts, type);
  size_t offset = 0;
  for (int r = 0; r < comm.size(); ++r) {
    for (size_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) {
      const double got = loadValue(type, out.data(), offset + i);
      const double want = inputValue(type, r, i, salt);
      if (got != want) {
        throw std::runtime_error(std::string(dataTypeName(type)) + " allgather of " +
                                 std::to_string(total) + (in_place ? " in place" : "") +
                                 ": block of rank " + std::to_string(r) + " element " +
                                 std::to_string(i) + " is " + std::to_string(got) + ", want " +
                                 std::to_string(want));
      }
    }
    offset += counts[static_cast<size_t>(r)];
  }
}

// Per-rank counts: all empty, one rank alone, every rank but one, uneven, and blocks of one
// chunk and a bit (4 KiB chunks of the whole output cut each block into several pieces).
std::vector<std::vector<size_t>> countPatterns(int size) {
  const size_t n = static_cast<size_t>(size);
  std::vector<std::vector<size_t>> patterns;
  patterns.push_back(std::vector<size_t>(n, 0));
  std::vector<size_t> one(n, 0);
  one[n - 1] = 5;
  patterns.push_back(one);
  std::vector<size_t> all_but_one(n, 33);
  all_but_one[1] = 0;
  patterns.push_back(all_but_one);
  std::vector<size_t> uneven, large;
  for (size_t r = 0; r < n; ++r) {
    uneven.push_back(1 + r * 7);
    large.push_back(3001 + r * 1000);
  }
  patterns.push_back(uneven);
  patterns.push_back(large);
  return patterns;
}

TEST_P(HierarchicalAllgatherTest, EveryDtypeAndLayoutOfCounts) {
  runRanks(spec(), [](Communicator& comm) {
    setHierarchical(comm, true, 4096);
    for (DataType type : allDataTypes()) {
      bool in_place = false;
      for (const auto& counts : countPatterns(comm.size())) {
        checkGather(comm, type, counts, in_place);
        in_place = !in_place;
      }
    }
  });
}

// The chunk may change between collectives (the autotuner does), to sizes that are not whole
// pages and to one chunk for the whole buffer; large blocks of different sizes.
TEST_P(HierarchicalAllgatherTest, ChunkChangesBetweenCallsOnLargeBlocks) {
  runRanks(spec(), [](Communicator& comm) {
    std::vector<size_t> counts;
    for (int r = 0; r < comm.size(); ++r) counts.push_back(200000 + static_cast<size_t>(r) * 30011);
    int salt = 0;
    for (int64_t chunk : {int64_t{4096}, int64_t{100003}, int64_t{1} << 20, int64_t{64} << 20}) {
      setHierarchical(comm, true, chunk);
      checkGather(comm, DataType::kFloat32, counts, false, ++salt);
      checkGather(comm, DataType::kInt8, counts, true, ++salt);
    }
  });
}

// Switching between the hierarchical allgather and the flat ring from one call to the next
// (every rank alike) gives the same results on both.
TEST_P(HierarchicalAllgatherTest, AlternatesWithTheFlatRing) {
  runRanks(spec(), [](Communicator& comm) {
    std::vector<size_t> counts;
    for (int r = 0; r < comm.size(); ++r) counts.push_back(70001 + static_cast<size_t>(r) * 3);
    for (int round = 0; round < 4; ++round) {
      setHierarchical(comm, round % 2 == 0, 256 * 1024);
      checkGather(comm, DataType::kFloat64, counts, round % 3 == 0, round);
    }
  });
}

// Rank 1 passes other per-rank counts (of the same total) than every other rank: every rank
// fails with kMismatch instead of hanging or reading past a block, and the communicator then
// refuses work, saying why.
TEST_P(HierarchicalAllgatherTest, CountsMismatchInsideAHostFailsEveryRank) {
  runRanks(spec(), [](Communicator& comm) {
    setHierarchical(comm, true, 4096);
    std::vector<size_t> counts(static_cast<size_t>(comm.size()), 40000);
    if (comm.rank() == 1) {
      counts[0] += 1;
      counts.back() -= 1;
    }
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<float> in(40000, 1.0f), out(total);
    try {
      comm.allgatherv(in.data(), out.data(), counts, DataType::kFloat32);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kMismatch ||
          std::string(e.what()).find("counts differ") == std::string::npos) {
        throw std::runtime_error(std::string("expected a counts mismatch, got ") +
                                 errorCodeName(e.code()) + ": " + e.what());
      }
      try {
        comm.barrier();
      } catch (const Error& later) {
        if (later.code() == ErrorCode::kAborted) return;
        throw std::runtime_error(std::string("after the mismatch: ") + later.what());
      }
      throw std::runtime_error("the communicator still worked after the mismatch");
    }
    throw std::runtime_error("mismatched counts were accepted");
  });
}

// The last host's first rank dies while many chunks are in flight: every other rank fails
// with kPeerLost naming it and its host, well within the timeout.
TEST_P(HierarchicalAllgatherTest, PeerLostMidPipelineIsNamed) {
  const RankSpec s = spec();
  const size_t per_rank = 1 << 20;
  std::vector<float> in(per_rank, 1.0f), out(per_rank * static_cast<size_t>(s.size));
  expectKilledRankNamed(
      s, s.size - 2, [](Communicator& comm) { setHierarchical(comm, true, 256 * 1024); },
      [&](Communicator& comm) {
        comm.allgather(in.data(), out.data(), per_rank, DataType::kFloat32);
      });
}

// Every rank sets the same knobs before the next collective.
void setHierarchicalReducescatter(Communicator& comm, bool on, int64_t chunk_bytes) {
  CommTuning t = comm.tuning();
  t.hierarchical_reducescatter = on;
  t.hierarchical_chunk_bytes = chunk_bytes;
  comm.setTuning(t);
}

// Reduce-scatters a buffer of every block (rank r's input: reference.h's values of rank r) and
// checks this rank's block against the reduction over ranks computed in double.
void checkReduceScatter(Communicator& comm, DataType type, ReduceOp op,
                        const std::vector<size_t>& counts, int salt, Scaling scaling = {}) {
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t me = static_cast<size_t>(comm.rank());
  const size_t offset = std::accumulate(counts.begin(), counts.begin() + comm.rank(), size_t{0});
  std::vector<char> in(std::max<size_t>(1, total * sizeOf(type)));
  for (size_t i = 0; i < total; ++i)
    storeValue(type, in.data(), i, inputValue(type, comm.rank(), i, salt));
  std::vector<char> out(std::max<size_t>(1, counts[me] * sizeOf(type)), 0x5a);
  comm.reducescatter(in.data(), out.data(), counts, type, op, scaling);
  const double scale = scaling.prescale * scaling.postscale;
  for (size_t i = 0; i < counts[me]; ++i) {
    const double want = expectedReduction(type, op, comm.size(), offset + i, salt) * scale;
    const double got = loadValue(type, out.data(), i);
    if (!near(type, op, got, want)) {
      throw std::runtime_error(std::string(dataTypeName(type)) + "/" + reduceOpName(op) +
                               " reduce-scatter of " + std::to_string(total) + ": element " +
                               std::to_string(i) + " of rank " + std::to_string(me) + " is " +
                               std::to_string(got) + ", want " + std::to_string(want));
    }
  }
}

class HierarchicalReducescatterTest : public HierarchicalAllgatherTest {};

TEST_P(HierarchicalReducescatterTest, EveryDtypeOpAndLayoutOfCounts) {
  runRanks(spec(), [](Communicator& comm) {
    setHierarchicalReducescatter(comm, true, 4096);
    int salt = 0;
    for (DataType type : allDataTypes()) {
      for (ReduceOp op : allReduceOps()) {
        if (type == DataType::kBool && op == ReduceOp::kAverage) continue;
        for (const auto& counts : countPatterns(comm.size())) {
          checkReduceScatter(comm, type, op, counts, ++salt % 7);
        }
      }
    }
  });
}

// Large blocks of different sizes with pre- and post-scaling, the chunk changing between calls
// (odd sizes, and one chunk for everything), alternating with the flat ring.
TEST_P(HierarchicalReducescatterTest, LargeBlocksScalingAndChunkChanges) {
  runRanks(spec(), [](Communicator& comm) {
    std::vector<size_t> counts;
    // Blocks of 160-220 KiB of float32: about 50 chunks of 4 KiB each, several odd chunks of
    // 30011 bytes, or one chunk for everything.
    for (int r = 0; r < comm.size(); ++r) counts.push_back(40000 + static_cast<size_t>(r) * 3001);
    int round = 0;
    for (int64_t chunk : {int64_t{4096}, int64_t{30011}, int64_t{1} << 20, int64_t{64} << 20}) {
      setHierarchicalReducescatter(comm, round % 3 != 2, chunk);
      checkReduceScatter(comm, DataType::kFloat32, ReduceOp::kSum, counts, round, {0.5, 0.25});
      checkReduceScatter(comm, DataType::kInt64, ReduceOp::kMax, counts, round + 1);
      checkReduceScatter(comm, DataType::kFloat64, ReduceOp::kAverage, counts, round + 2);
      ++round;
    }
  });
}

// A rank dies while many chunks are in flight: every other rank fails with kPeerLost naming
// it and its host, well within the timeout.
TEST_P(HierarchicalReducescatterTest, PeerLostMidPipelineIsNamed) {
  const RankSpec s = spec();
  const std::vector<size_t> counts(static_cast<size_t>(s.size), 1 << 20);
  std::vector<float> in(counts[0] * counts.size(), 1.0f), out(counts[0]);
  expectKilledRankNamed(
      s, 1, [](Communicator& comm) { setHierarchicalReducescatter(comm, true, 256 * 1024); },
      [&](Communicator& comm) {
        comm.reducescatter(in.data(), out.data(), counts, DataType::kFloat32, ReduceOp::kSum);
      });
}

// Interleaved: each host's ranks are not next to each other in rank order, so a rank's
// counterparts' blocks and its host's blocks lie apart in the output.
const auto kLayouts = ::testing::Values(
    HostLayout{"hosts_2x2", {"hostA", "hostA", "hostB", "hostB"}},
    HostLayout{"hosts_2x2_interleaved", {"hostA", "hostB", "hostA", "hostB"}},
    HostLayout{"hosts_3x2", {"hostA", "hostA", "hostB", "hostB", "hostC", "hostC"}},
    HostLayout{"hosts_2x3", {"hostA", "hostB", "hostB", "hostA", "hostA", "hostB"}});
std::string layoutLabel(const ::testing::TestParamInfo<HostLayout>& info) {
  return info.param.label;
}
INSTANTIATE_TEST_SUITE_P(Hosts, HierarchicalAllgatherTest, kLayouts, layoutLabel);
INSTANTIATE_TEST_SUITE_P(Hosts, HierarchicalReducescatterTest, kLayouts, layoutLabel);

}  // namespace
}  // namespace ronde::testing
