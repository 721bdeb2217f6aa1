// The NCCL backend with several ranks, one GPU each (forked processes, rank r on GPU r): every
// collective x type x op against values computed on the host, the grouped paths (unequal
// allgatherv blocks as broadcasts, unequal reducescatter blocks as reduces, alltoallv as
// sends and receives), and the failures only several ranks can show: ranks that call different
// collectives get Error(kMismatch), alltoall splits that do not pair up end in a timeout with
// NCCL aborted, and a rank that dies fails the others instead of hanging them.
//
// A machine needs 3 GPUs for these; with fewer they skip, saying so. CI runs them on CUDA and
// NCCL emulated on the host (tests/emulated_gpu, scripts/test_emulated_gpu.sh).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/backend_registry.h"
#include "gpu_available.h"
#include "support/multiprocess.h"
#include "support/reference.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

constexpr int kRanks = 3;

#define SKIP_WITHOUT_GPU_PER_RANK()                                                   \
  do {                                                                                \
    const int gpus_ = gpusSeenByAChild();                                             \
    if (gpus_ < kRanks)                                                               \
      GTEST_SKIP() << "needs " << kRanks << " GPUs (NCCL runs one rank per GPU); sees " \
                   << gpus_;                                                          \
  } while (0)

void check(cudaError_t status, const char* what) {
  REQUIRE(status == cudaSuccess, what << ": " << cudaGetErrorString(status));
}

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    check(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr = nullptr;
  size_t bytes;
};

// n elements of inputValue(type, rank, first + i, salt), on the device.
void fill(void* device, DataType type, size_t n, int rank, int salt, size_t first = 0) {
  std::vector<unsigned char> host(std::max<size_t>(n * sizeOf(type), 1));
  for (size_t i = 0; i < n; ++i) {
    storeValue(type, host.data(), i, inputValue(type, rank, first + i, salt));
  }
  check(cudaMemcpy(device, host.data(), n * sizeOf(type), cudaMemcpyHostToDevice), "cudaMemcpy");
}

std::vector<unsigned char> fetch(const void* device, size_t bytes) {
  std::vector<unsigned char> host(std::max<size_t>(bytes, 1));
  check(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

// Exact for integers; floats within their rounding (an average over 3 ranks is not exact).
bool near(DataType type, double got, double want) {
  if (!isFloat(type)) return got == want;
  const double tolerance = type == DataType::kFloat64   ? 1e-12
                           : type == DataType::kFloat32 ? 1e-6
                                                        : 1.0 / 128;
  return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
}

struct Options {
  int timeout_ms = 60000;
};

// Runs `body` on kRanks forked ranks, each with an NCCL communicator on GPU `rank`; returns
// each rank's outcome.
std::vector<ChildOutcome> runNcclRanks(
    const std::function<void(Communicator&, int rank)>& body, Options options = {}) {
  RankSpec spec;
  spec.size = kRanks;
  spec.timeout_seconds = 180;
  return runProcessesRaw(spec, [&](int rank, int port) {
    CommOptions o;
    o.rank = rank;
    o.size = kRanks;
    o.store = connectStore(spec, port);
    o.cuda_device = rank;
    o.timeout = Duration(options.timeout_ms);
    check(cudaSetDevice(rank), "cudaSetDevice");
    auto comm = deviceBackend("nccl").create(o);
    REQUIRE(comm->transportName() == "nccl", comm->transportName());
    body(*comm, rank);
  });
}

void expectAllSucceeded(const std::vector<ChildOutcome>& outcomes) {
  for (const ChildOutcome& o : outcomes) {
    EXPECT_EQ(o.exit_code, 0) << "rank " << o.rank << ": " << o.message;
  }
}

TEST(NcclMultiRank, AllreduceOfEveryTypeAndOpAgreesWithTheHost) {
  SKIP_WITHOUT_GPU_PER_RANK();
  expectAllSucceeded(runNcclRanks([](Communicator& comm, int rank) {
    int salt = 0;
    for (DataType type : allDataTypes()) {
      for (ReduceOp op : allReduceOps()) {
        if (!comm.supportsReduction(type, op)) continue;  // int16: the runtime stages it
        if (type == DataType::kBool && op == ReduceOp::kAverage) continue;
        for (size_t n : {size_t{3}, size_t{70000}}) {
          ++salt;
          const double pre = isFloat(type) && op == ReduceOp::kSum ? 0.5 : 1.0;
          const double post = isFloat(type) && op == ReduceOp::kAverage ? 4.0 : 1.0;
          DeviceBuffer in(n * sizeOf(type)), out(n * sizeOf(type));
          fill(in.ptr, type, n, rank, salt);
          const bool in_place = salt % 2 == 0;
          void* result = in_place ? in.ptr : out.ptr;
          comm.allreduce(in.ptr, result, n, type, op, {pre, post});
          auto got = fetch(result, n * sizeOf(type));
          for (size_t i = 0; i < n; ++i) {
            const double want = expectedAllreduce(type, op, kRanks, i, salt, pre, post);
            REQUIRE(near(type, loadValue(type, got.data(), i), want),
                    dataTypeName(type) << " " << reduceOpName(op) << " n=" << n << " element "
                                       << i << ": " << loadValue(type, got.data(), i)
                                       << ", expected " << want);
          }
        }
      }
    }
    REQUIRE(!comm.supportsReduction(DataType::kInt16, ReduceOp::kSum), "int16 on NCCL");
  }));
}

// Integer prescale and postscale truncate toward zero at each step, as the host backends do.
TEST(NcclMultiRank, IntegerScalesTruncateAtEachStep) {
  SKIP_WITHOUT_GPU_PER_RANK();
  expectAllSucceeded(runNcclRanks([](Communicator& comm, int rank) {
    const std::vector<int32_t> mine = {7 + rank, -7 - rank, 1, 100};
    DeviceBuffer buffer(16);
    check(cudaMemcpy(buffer.ptr, mine.data(), 16, cudaMemcpyHostToDevice), "cudaMemcpy");
    comm.allreduce(buffer.ptr, buffer.ptr, 4, DataType::kInt32, ReduceOp::kSum, {0.5, 3.0});
    auto got = fetch(buffer.ptr, 16);
    std::vector<int32_t> values(4);
    std::memcpy(values.data(), got.data(), 16);
    std::vector<int32_t> want(4, 0);
    for (size_t i = 0; i < 4; ++i) {
      int32_t sum = 0;
      for (int r = 0; r < kRanks; ++r) {
        const std::vector<int32_t> theirs = {7 + r, -7 - r, 1, 100};
        sum += static_cast<int32_t>(std::trunc(theirs[i] * 0.5));
      }
      want[i] = sum * 3;
    }
    REQUIRE(values == want, values[0] << " " << values[1] << " " << values[2] << " " << values[3]);
  }));
}

TEST(NcclMultiRank, AllgathervEqualAndUnequalBlocks) {
  SKIP_WITHOUT_GPU_PER_RANK();
  expectAllSucceeded(runNcclRanks([](Communicator& comm, int rank) {
    for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64,
                          DataType::kUInt8, DataType::kBool}) {
      for (const std::vector<size_t>& counts :
           {std::vector<size_t>{500, 500, 500}, std::vector<size_t>{1000, 0, 17},
            std::vector<size_t>{1, 40000, 2}}) {
        size_t total = 0, first = 0;
        for (int r = 0; r < kRanks; ++r) {
          if (r < rank) first += counts[r];
          total += counts[r];
        }
        DeviceBuffer in(counts[rank] * sizeOf(type)), out(total * sizeOf(type));
        fill(in.ptr, type, counts[rank], rank, 3, first);
        comm.allgatherv(in.ptr, out.ptr, counts, type);
        auto got = fetch(out.ptr, total * sizeOf(type));
        size_t at = 0;
        for (int r = 0; r < kRanks; ++r) {
          for (size_t i = 0; i < counts[r]; ++i, ++at) {
            REQUIRE(loadValue(type, got.data(), at) == inputValue(type, r, at, 3),
                    dataTypeName(type) << " block of rank " << r << " element " << i);
          }
        }
      }
    }
  }));
}

TEST(NcclMultiRank, BroadcastFromEveryRoot) {
  SKIP_WITHOUT_GPU_PER_RANK();
  expectAllSucceeded(runNcclRanks([](Communicator& comm, int rank) {
    for (int root = 0; root < kRanks; ++root) {
      for (DataType type : {DataType::kFloat64, DataType::kFloat16, DataType::kInt8}) {
        const size_t n = 33333;
        DeviceBuffer buffer(n * sizeOf(type));
        fill(buffer.ptr, type, n, rank, root);
        comm.broadcast(buffer.ptr, n, type, root);
        auto got = fetch(buffer.ptr, n * sizeOf(type));
        for (size_t i = 0; i < n; ++i) {
          REQUIRE(loadValue(type, got.data(), i) == inputValue(type, root, i, root),
                  dataTypeName(type) << " from root " << root << " element " << i);
        }
      }
    }
  }));
}

TEST(NcclMultiRank, AlltoallvWithUnequalSplits) {
  SKIP_WITHOUT_GPU_PER_RANK();
  expectAllSucceeded(runNcclRanks([](Communicator& comm, int rank) {
    // Rank s sends (s + 1) * (d + 2) elements to rank d; zero from rank 1 to rank 0.
    auto count = [](int s, int d) -> size_t {
      return s == 1 && d == 0 ? 0 : static_cast<size_t>((s + 1) * (d + 2)) * 100;
    };
    for (DataType type : {DataType::kFloat32, DataType::kInt16, DataType::kBool}) {
      std::vector<size_t> send(kRanks), recv(kRanks);
      size_t sent = 0, received = 0;
      for (int r = 0; r < kRanks; ++r) {
        send[r] = count(rank, r);
        recv[r] = count(r, rank);
        sent += send[r];
        received += recv[r];
      }
      DeviceBuffer in(sent * sizeOf(type)), out(received * sizeOf(type));
      fill(in.ptr, type, sent, rank, 9);
      comm.alltoallv(in.ptr, send, out.ptr, recv, type);
      auto got = fetch(out.ptr, received * sizeOf(type));
      size_t at = 0;
      for (int s = 0; s < kRanks; ++s) {
        size_t offset = 0;  // where rank s's block for this rank starts in its input
        for (int d = 0; d < rank; ++d) offset += count(s, d);
        for (size_t i = 0; i < recv[s]; ++i, ++at) {
          REQUIRE(loadValue(type, got.data(), at) == inputValue(type, s, offset + i, 9),
                  dataTypeName(type) << " from rank " << s << " element " << i);
        }
      }
    }
  }));
}

TEST(NcclMultiRank, ReducescatterEqualUnequalAndInPlace) {
  SKIP_WITHOUT_GPU_PER_RANK();
  expectAllSucceeded(runNcclRanks([](Communicator& comm, int rank) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
      for (const std::vector<size_t>& counts :
           {std::vector<size_t>{1000, 1000, 1000}, std::vector<size_t>{5, 0, 20000}}) {
        const DataType type = DataType::kFloat32;
        size_t total = 0, first = 0;
        for (int r = 0; r < kRanks; ++r) {
          if (r < rank) first += counts[r];
          total += counts[r];
        }
        const double pre = op == ReduceOp::kSum ? 2.0 : 1.0;
        for (bool in_place : {false, true}) {
          DeviceBuffer in(total * sizeOf(type)), out(counts[rank] * sizeOf(type));
          fill(in.ptr, type, total, rank, 11);
          void* result = in_place ? in.ptr : out.ptr;
          comm.reducescatter(in.ptr, result, counts, type, op, {pre, 0.5});
          auto got = fetch(result, counts[rank] * sizeOf(type));
          for (size_t i = 0; i < counts[rank]; ++i) {
            double want = expectedReduction(type, op, kRanks, first + i, 11) * 0.5;
            if (op == ReduceOp::kSum) want *= pre;
            REQUIRE(near(type, loadValue(type, got.data(), i), want),
                    reduceOpName(op) << (in_place ? " in place" : "") << " element " << i
                                     << ": " << loadValue(type, got.data(), i) << ", expected "
                                     << want);
          }
        }
      }
    }
    comm.barrier();
  }));
}

TEST(NcclMultiRank, RanksCallingDifferentCollectivesGetAMismatchNamingThem) {
  SKIP_WITHOUT_GPU_PER_RANK();
  expectAllSucceeded(runNcclRanks([](Communicator& comm, int rank) {
    DeviceBuffer buffer(4000);
    try {
      if (rank == 2) {
        comm.broadcast(buffer.ptr, 1000, DataType::kFloat32, 0);
      } else {
        comm.allreduce(buffer.ptr, buffer.ptr, 1000, DataType::kFloat32, ReduceOp::kSum);
      }
      REQUIRE(false, "ranks calling different collectives were not stopped");
    } catch (const Error& e) {
      REQUIRE(e.code() == ErrorCode::kMismatch, e.what());
      REQUIRE(std::string(e.what()).find("rank 2") != std::string::npos, e.what());
    }
  }));
}

TEST(NcclMultiRank, AlltoallSplitsThatDoNotPairUpEndInATimeoutNotAHang) {
  SKIP_WITHOUT_GPU_PER_RANK();
  Options options;
  options.timeout_ms = 3000;
  expectAllSucceeded(runNcclRanks(
      [](Communicator& comm, int rank) {
        DeviceBuffer in(4096), out(4096);
        std::vector<size_t> send(kRanks, 10), recv(kRanks, 10);
        if (rank == 0) recv[1] = 11;  // rank 1 sends it 10
        try {
          comm.alltoallv(in.ptr, send, out.ptr, recv, DataType::kFloat32);
          REQUIRE(false, "an alltoall whose splits disagree finished");
        } catch (const Error& e) {
          REQUIRE(e.code() == ErrorCode::kTimeout || e.code() == ErrorCode::kAborted ||
                      e.code() == ErrorCode::kPeerLost,
                  e.what());
          const std::string text = e.what();
          REQUIRE(text.find("rank ") != std::string::npos, text);
        }
        REQUIRE(comm.aborted(), "the communicator is aborted after the failure");
      },
      options));
}

TEST(NcclMultiRank, ARankThatDiesFailsTheOthersInsteadOfHangingThem) {
  SKIP_WITHOUT_GPU_PER_RANK();
  Options options;
  options.timeout_ms = 5000;
  auto outcomes = runNcclRanks(
      [](Communicator& comm, int rank) {
        DeviceBuffer buffer(4000);
        comm.allreduce(buffer.ptr, buffer.ptr, 1000, DataType::kFloat32, ReduceOp::kSum);
        if (rank == 2) ::_exit(0);  // gone without a word
        try {
          comm.allreduce(buffer.ptr, buffer.ptr, 1000, DataType::kFloat32, ReduceOp::kSum);
          REQUIRE(false, "an allreduce finished without rank 2");
        } catch (const Error& e) {
          const std::string text = e.what();
          REQUIRE(e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout, text);
          REQUIRE(text.find("rank " + std::to_string(rank)) != std::string::npos ||
                      text.find("rank 2") != std::string::npos,
                  text);
        }
      },
      options);
  expectAllSucceeded(outcomes);
}

}  // namespace
}  // namespace ronde::testing
