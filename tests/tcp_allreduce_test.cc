// The TCP allreduce at its chunk and segment boundaries: every dtype and op, in place and
// not, 2 to 4 ranks, small chunks so that the pipeline turns over many times, each result
// against the independent reference; the input of an out-of-place call must stay untouched
// (the ring reads it in place of a copy). And a peer killed in the middle of a large
// out-of-place allreduce is named, with its host, within the collective timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "support/multiprocess.h"
#include "support/reference.h"

namespace ronde::testing {
namespace {

constexpr int64_t kChunk = 4096;  // the smallest chunk CommTuning allows

bool matches(DataType type, ReduceOp op, double got, double want) {
  if (op == ReduceOp::kAverage && !isFloat(type)) return std::fabs(got - want) < 1.0;
  if (!isFloat(type)) {
    switch (type) {  // integers wrap as the kernels do
      case DataType::kUInt8:
        return got == static_cast<uint8_t>(static_cast<int64_t>(want));
      case DataType::kInt8:
        return got == static_cast<int8_t>(static_cast<int64_t>(want));
      case DataType::kInt16:
        return got == static_cast<int16_t>(static_cast<int64_t>(want));
      case DataType::kUInt16:
        return got == static_cast<uint16_t>(static_cast<int64_t>(want));
      default:
        return got == want;
    }
  }
  double tolerance = type == DataType::kBFloat16 ? 0.01 : type == DataType::kFloat16 ? 0.002 : 1e-6;
  return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
}

// Counts whose segments (count / ranks) end just before, on and just after a chunk boundary,
// one and two chunks per segment, and fewer elements than ranks (empty segments).
std::vector<size_t> boundaryCounts(DataType type, int ranks) {
  const size_t per_chunk = static_cast<size_t>(kChunk) / sizeOf(type);
  std::vector<size_t> counts{static_cast<size_t>(ranks - 1), 1};
  for (size_t chunks : {size_t{1}, size_t{2}}) {
    const size_t at = per_chunk * chunks * static_cast<size_t>(ranks);
    counts.insert(counts.end(), {at - 1, at, at + 1});
  }
  return counts;
}

class TcpAllreduceTest : public ::testing::TestWithParam<int> {};

TEST_P(TcpAllreduceTest, EveryDtypeOpAroundChunkBoundaries) {
  RankSpec spec;
  spec.size = GetParam();
  spec.transport = TransportKind::kTcp;
  spec.timeout_seconds = 300;
  runRanks(spec, [](Communicator& comm) {
    ASSERT_TRUE(comm.tunable());
    CommTuning tuning = comm.tuning();
    tuning.tcp_chunk_bytes = kChunk;
    tuning.small_allreduce_bytes = 0;  // the ring at every size
    comm.setTuning(tuning);
    std::vector<std::string> failures;
    for (DataType type : allDataTypes()) {
      for (ReduceOp op : allReduceOps()) {
        if (type == DataType::kBool && op == ReduceOp::kAverage) continue;
        for (size_t count : boundaryCounts(type, comm.size())) {
          for (bool in_place : {false, true}) {
            const size_t bytes = count * sizeOf(type);
            std::vector<char> in(std::max<size_t>(bytes, 1));
            for (size_t i = 0; i < count; ++i)
              storeValue(type, in.data(), i, inputValue(type, comm.rank(), i));
            const std::vector<char> original = in;
            std::vector<char> out(in.size(), 0x5a);
            char* result = in_place ? in.data() : out.data();
            comm.allreduce(in.data(), result, count, type, op);
            const std::string what = std::string(dataTypeName(type)) + "/" + reduceOpName(op) +
                                     "/" + std::to_string(count) + (in_place ? " in place" : "");
            for (size_t i = 0; i < count; ++i) {
              double want = expectedReduction(type, op, comm.size(), i);
              double got = loadValue(type, result, i);
              if (!matches(type, op, got, want)) {
                failures.push_back(what + " element " + std::to_string(i) + ": got " +
                                   std::to_string(got) + ", want " + std::to_string(want));
                break;
              }
            }
            if (!in_place && std::memcmp(in.data(), original.data(), bytes) != 0) {
              failures.push_back(what + ": the input was written");
            }
          }
        }
      }
    }
    if (!failures.empty()) {
      std::string text = "rank " + std::to_string(comm.rank()) + ":";
      for (size_t i = 0; i < failures.size() && i < 10; ++i) text += "\n  " + failures[i];
      throw std::runtime_error(text);
    }
  });
}

// Scaling takes the copying path (prescale) or folds into the last reduction (postscale):
// both against the reference, across several chunks.
TEST_P(TcpAllreduceTest, ScalingAcrossChunks) {
  RankSpec spec;
  spec.size = GetParam();
  spec.transport = TransportKind::kTcp;
  runRanks(spec, [](Communicator& comm) {
    CommTuning tuning = comm.tuning();
    tuning.tcp_chunk_bytes = kChunk;
    comm.setTuning(tuning);
    const size_t count = 3 * 4096 * static_cast<size_t>(comm.size()) + 7;
    for (Scaling scaling : {Scaling{1.0, 0.25}, Scaling{4.0, 1.0}, Scaling{2.0, 0.5}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        std::vector<float> in(count), out(count, -1.0f);
        for (size_t i = 0; i < count; ++i)
          in[i] = static_cast<float>(inputValue(DataType::kFloat32, comm.rank(), i));
        comm.allreduce(in.data(), out.data(), count, DataType::kFloat32, op, scaling);
        for (size_t i = 0; i < count; ++i) {
          double want = expectedReduction(DataType::kFloat32, op, comm.size(), i) *
                        scaling.prescale * scaling.postscale;
          if (!matches(DataType::kFloat32, ReduceOp::kSum, out[i], want)) {
            throw std::runtime_error("scaling " + std::to_string(scaling.prescale) + "/" +
                                     std::to_string(scaling.postscale) + " " + reduceOpName(op) +
                                     " element " + std::to_string(i) + ": got " +
                                     std::to_string(out[i]) + ", want " + std::to_string(want));
          }
        }
      }
    }
  });
}

// Min and max keep the first operand on NaN: every rank must still end with the same bits,
// whichever algorithm (recursive doubling below the small cutoff, the ring above it) ran.
TEST_P(TcpAllreduceTest, MinMaxWithNaNAgreeOnEveryRank) {
  RankSpec spec;
  spec.size = GetParam();
  spec.transport = TransportKind::kTcp;
  runRanks(spec, [](Communicator& comm) {
    const size_t n = static_cast<size_t>(comm.size());
    for (int64_t cutoff : {int64_t{64 * 1024}, int64_t{0}}) {
      CommTuning tuning = comm.tuning();
      tuning.small_allreduce_bytes = cutoff;
      tuning.tcp_chunk_bytes = kChunk;
      comm.setTuning(tuning);
      for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
        const size_t count = 3000;
        std::vector<float> in(count), out(count);
        for (size_t i = 0; i < count; ++i) {
          // A NaN on one rank per element (which one varies), numbers on the others.
          const bool nan = i % (n + 1) == static_cast<size_t>(comm.rank());
          in[i] = nan ? std::nanf("")
                      : static_cast<float>((i * 7 + static_cast<size_t>(comm.rank())) % 13);
        }
        comm.allreduce(in.data(), out.data(), count, DataType::kFloat32, op);
        std::vector<float> all(count * n);
        comm.allgather(out.data(), all.data(), count, DataType::kFloat32);
        for (size_t r = 1; r < n; ++r) {
          if (std::memcmp(all.data(), all.data() + r * count, count * sizeof(float)) != 0) {
            throw std::runtime_error(std::string(reduceOpName(op)) + " with NaN, cutoff " +
                                     std::to_string(cutoff) + ": rank " + std::to_string(r) +
                                     " ended with other bits than rank 0");
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpAllreduceTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "ranks_" + std::to_string(info.param); });

// Rank 1 dies while 32 MiB allreduces stream out of place; rank 0 must fail with an error
// that names rank 1 and its host, well within the 20 s collective timeout.
TEST(TcpAllreduceFaultTest, PeerKilledMidTransferIsNamedWithItsHost) {
  RankSpec spec;
  spec.size = 2;
  spec.transport = TransportKind::kTcp;
  spec.hosts = {"hostA", "hostB"};
  spec.timeout_seconds = 90;
  spec.collective_timeout_ms = 20000;
  auto outcomes = runRanksRaw(spec, [](Communicator& comm) {
    std::vector<float> in(8 * 1024 * 1024, 1.0f), out(in.size());
    comm.barrier();
    if (comm.rank() == 1) {
      std::thread killer([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ::kill(::getpid(), SIGKILL);
      });
      for (;;) comm.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
    }
    auto start = std::chrono::steady_clock::now();
    try {
      for (;;) comm.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kPeerLost) {
        throw std::runtime_error(std::string("expected peer_lost, got ") + errorCodeName(e.code()) +
                                 ": " + e.what());
      }
      if (std::string(e.what()).find("rank 1 (host hostB)") == std::string::npos) {
        throw std::runtime_error(std::string("the error does not name rank 1 and its host: ") +
                                 e.what());
      }
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(15)) {
      throw std::runtime_error("the dead rank was noticed too late");
    }
  });
  EXPECT_EQ(outcomes[1].signal, SIGKILL);
  EXPECT_EQ(outcomes[0].exit_code, 0) << outcomes[0].message;
}

}  // namespace
}  // namespace ronde::testing
