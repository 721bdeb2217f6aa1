// Bad input and failures: every rank gets a clear error naming what went wrong, never a hang.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "support/multiprocess.h"

namespace ronde::testing {
namespace {

struct FaultCase {
  std::string label;
  TransportKind transport;
  std::vector<std::string> hosts;
};

class FaultTest : public ::testing::TestWithParam<FaultCase> {
 protected:
  RankSpec spec(int size) const {
    RankSpec s;
    s.size = size;
    s.transport = GetParam().transport;
    if (!GetParam().hosts.empty()) s.hosts.assign(GetParam().hosts.begin(), GetParam().hosts.begin() + size);
    s.timeout_seconds = 90;
    s.collective_timeout_ms = 20000;
    return s;
  }
};

// Throws unless `fn` throws an ronde::Error of `code` whose message contains every fragment.
template <typename Fn>
void expectError(ErrorCode code, const std::vector<std::string>& fragments, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() != code) {
      throw std::runtime_error(std::string("expected ") + errorCodeName(code) + " but got " +
                               errorCodeName(e.code()) + ": " + e.what());
    }
    for (const auto& fragment : fragments) {
      if (std::string(e.what()).find(fragment) == std::string::npos) {
        throw std::runtime_error("error message lacks '" + fragment + "': " + e.what());
      }
    }
    return;
  }
  throw std::runtime_error("expected an error, but the call succeeded");
}

TEST_P(FaultTest, MismatchedCountsFailOnEveryRank) {
  runRanks(spec(3), [](Communicator& comm) {
    std::vector<float> data(200, 1.0f);
    size_t count = comm.rank() == 1 ? 150 : 100;
    expectError(ErrorCode::kMismatch, {"element count", "rank 1"}, [&] {
      comm.allreduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    });
    // The communicator is unusable afterwards, and says why.
    expectError(ErrorCode::kAborted, {"element count"}, [&] { comm.barrier(); });
  });
}

TEST_P(FaultTest, MismatchedDtypesFailOnEveryRank) {
  runRanks(spec(2), [](Communicator& comm) {
    std::vector<double> data(64, 1.0);
    DataType type = comm.rank() == 0 ? DataType::kFloat32 : DataType::kInt32;
    expectError(ErrorCode::kMismatch, {"dtype", "float32", "int32"}, [&] {
      comm.allreduce(data.data(), data.data(), 64, type, ReduceOp::kSum);
    });
  });
}

TEST_P(FaultTest, MismatchedOpsAndKindsFail) {
  runRanks(spec(2), [](Communicator& comm) {
    std::vector<float> data(64, 1.0f);
    if (comm.rank() == 0) {
      expectError(ErrorCode::kMismatch, {"collective"}, [&] { comm.barrier(); });
    } else {
      expectError(ErrorCode::kMismatch, {"collective"}, [&] {
        comm.allreduce(data.data(), data.data(), 64, DataType::kFloat32, ReduceOp::kMax);
      });
    }
  });
}

TEST_P(FaultTest, InvalidRootIsAClearErrorEverywhere) {
  runRanks(spec(2), [](Communicator& comm) {
    std::vector<float> data(16, 1.0f);
    int root = comm.rank() == 0 ? 5 : 0;  // only rank 0 passes a bad root
    ErrorCode code = comm.rank() == 0 ? ErrorCode::kInvalidArgument : ErrorCode::kInvalidArgument;
    expectError(code, {"root 5"}, [&] { comm.broadcast(data.data(), 16, DataType::kFloat32, root); });
  });
}

TEST_P(FaultTest, MismatchedAlltoallSplits) {
  runRanks(spec(2), [](Communicator& comm) {
    std::vector<float> in(16, 1.0f), out(16, 0.0f);
    std::vector<size_t> send{4, 4};
    std::vector<size_t> recv{4, comm.rank() == 0 ? size_t{5} : size_t{4}};
    expectError(ErrorCode::kMismatch, {"alltoall split mismatch"}, [&] {
      comm.alltoallv(in.data(), send, out.data(), recv, DataType::kFloat32);
    });
  });
}

TEST_P(FaultTest, KilledRankIsNamedByEveryOtherRank) {
  RankSpec s = spec(3);
  auto outcomes = runRanksRaw(s, [](Communicator& comm) {
    std::vector<float> data(4 * 1024 * 1024, 1.0f);
    comm.barrier();
    if (comm.rank() == 1) {
      // Die in the middle of a large collective: after it started, before it ends.
      std::thread killer([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ::kill(::getpid(), SIGKILL);
      });
      for (;;) comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    }
    auto start = std::chrono::steady_clock::now();
    expectError(ErrorCode::kPeerLost, {"rank 1"}, [&] {
      for (;;) comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    });
    auto waited = std::chrono::steady_clock::now() - start;
    if (waited > std::chrono::seconds(15)) throw std::runtime_error("the dead rank was noticed too late");
  });
  EXPECT_EQ(outcomes[1].signal, SIGKILL);
  EXPECT_EQ(outcomes[0].exit_code, 0) << outcomes[0].message;
  EXPECT_EQ(outcomes[2].exit_code, 0) << outcomes[2].message;
}

std::vector<FaultCase> faultCases() {
  return {{"shm", TransportKind::kAuto, {}},
          {"tcp", TransportKind::kTcp, {}},
          {"hosts", TransportKind::kAuto, {"hostA", "hostA", "hostB"}}};
}

INSTANTIATE_TEST_SUITE_P(Transports, FaultTest, ::testing::ValuesIn(faultCases()),
                         [](const auto& info) { return info.param.label; });

TEST(SecretTest, DataConnectionsRequireTheJobSecret) {
  // The store accepts the right secret; a rank with a wrong one cannot join.
  RankSpec s;
  s.size = 2;
  s.transport = TransportKind::kTcp;
  s.secret = "right secret";
  runRanks(s, [](Communicator& comm) {
    float x = 1.0f;
    comm.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    if (x != 2.0f) throw std::runtime_error("allreduce with a secret gave a wrong result");
  });
}

TEST(SecretTest, WrongSecretIsRefused) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "the secret");
  try {
    auto store = makeTcpStore("127.0.0.1", server->port(), "not the secret", std::chrono::seconds(5));
    store->setString("k", "v");
    FAIL() << "a client with a wrong secret was served";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAuth) << e.what();
  }
}

}  // namespace
}  // namespace ronde::testing
