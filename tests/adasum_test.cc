// Adasum against a direct implementation of its definition: the pairwise formula applied
// along the binary tree of ranks (per tensor), in real processes on shared memory, TCP and
// two simulated hosts (sum within a host, Adasum across).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/adasum.h"
#include "common/half.h"
#include "support/adasum_reference.h"
#include "support/multiprocess.h"

namespace ronde::testing {
namespace {

// A vector of values that differs per rank and tensor, partly aligned across ranks (a shared
// component), so the coefficients are neither 1 nor 1/2.
double inputValue(int rank, size_t tensor, size_t i) {
  return std::sin(0.37 * static_cast<double>(i) + static_cast<double>(tensor)) +
         0.6 * std::cos(1.3 * static_cast<double>(rank) * static_cast<double>(i + 1) +
                        static_cast<double>(rank));
}

using Vector = AdasumVector;

struct Case {
  std::string label;
  TransportKind transport;
  std::vector<std::string> hosts;
  int size;
  int ranks_per_host;  // > 1: the expected result sums within hosts first
};

class AdasumTest : public ::testing::TestWithParam<Case> {
 protected:
  RankSpec spec() const {
    RankSpec s;
    s.size = GetParam().size;
    s.transport = GetParam().transport;
    s.hosts = GetParam().hosts;
    s.timeout_seconds = 300;
    return s;
  }
};

std::vector<double> expected(int size, int per_host, const std::vector<size_t>& counts,
                             size_t tensor) {
  std::vector<Vector> per_rank(static_cast<size_t>(size), Vector(counts[tensor]));
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < counts[tensor]; ++i) per_rank[r][i] = inputValue(r, tensor, i);
  }
  return adasumOfHosts(per_rank, static_cast<size_t>(per_host));
}

template <typename T, typename Load, typename Store>
void checkType(Communicator& comm, DataType type, double tolerance, Load load, Store store,
               int per_host) {
  // Fused (several tensors in one buffer, one straddling each halving point) and unfused.
  for (const std::vector<size_t>& counts :
       std::vector<std::vector<size_t>>{{1}, {1000}, {3, 17, 1, 250, 9}, {4097, 0, 31}}) {
    size_t total = 0;
    for (size_t c : counts) total += c;
    std::vector<T> buffer(total);
    for (size_t t = 0, at = 0; t < counts.size(); at += counts[t], ++t) {
      for (size_t i = 0; i < counts[t]; ++i) buffer[at + i] = store(inputValue(comm.rank(), t, i));
    }
    adasumAllreduce(comm, buffer.data(), counts, type);
    for (size_t t = 0, at = 0; t < counts.size(); at += counts[t], ++t) {
      Vector want = expected(comm.size(), per_host, counts, t);
      for (size_t i = 0; i < counts[t]; ++i) {
        double got = load(buffer[at + i]);
        if (std::fabs(got - want[i]) > tolerance * std::max(1.0, std::fabs(want[i]))) {
          throw std::runtime_error(std::string(dataTypeName(type)) + " tensor " +
                                   std::to_string(t) + " element " + std::to_string(i) + ": got " +
                                   std::to_string(got) + ", want " + std::to_string(want[i]));
        }
      }
    }
  }
}

TEST_P(AdasumTest, MatchesTheTreeOfPairwiseCombinations) {
  const int per_host = GetParam().ranks_per_host;
  runRanks(spec(), [per_host](Communicator& comm) {
    auto same = [](double v) { return v; };
    checkType<double>(comm, DataType::kFloat64, 1e-12, same, same, per_host);
    checkType<float>(comm, DataType::kFloat32, 1e-5, [](float v) { return double(v); },
                     [](double v) { return static_cast<float>(v); }, per_host);
    checkType<uint16_t>(comm, DataType::kFloat16, 1e-2,
                        [](uint16_t v) { return double(halfToFloat(v)); },
                        [](double v) { return floatToHalf(static_cast<float>(v)); }, per_host);
    checkType<uint16_t>(comm, DataType::kBFloat16, 3e-2,
                        [](uint16_t v) { return double(bfloat16ToFloat(v)); },
                        [](double v) { return floatToBfloat16(static_cast<float>(v)); }, per_host);
  });
}

TEST_P(AdasumTest, EveryRankEndsWithTheSameBits) {
  runRanks(spec(), [](Communicator& comm) {
    std::vector<float> buffer(5000);
    for (size_t i = 0; i < buffer.size(); ++i) {
      buffer[i] = static_cast<float>(inputValue(comm.rank(), 0, i));
    }
    adasumAllreduce(comm, buffer.data(), {1234, 3766}, DataType::kFloat32);
    std::vector<float> everyone(buffer.size() * static_cast<size_t>(comm.size()));
    comm.allgather(buffer.data(), everyone.data(), buffer.size(), DataType::kFloat32);
    for (int r = 0; r < comm.size(); ++r) {
      if (std::memcmp(everyone.data() + r * buffer.size(), buffer.data(),
                      buffer.size() * sizeof(float)) != 0) {
        throw std::runtime_error("rank " + std::to_string(r) + " differs");
      }
    }
  });
}

std::vector<Case> cases() {
  return {
      {"shm_2", TransportKind::kAuto, {}, 2, 1},
      {"shm_4", TransportKind::kAuto, {}, 4, 1},
      {"tcp_2", TransportKind::kTcp, {}, 2, 1},
      {"tcp_4", TransportKind::kTcp, {}, 4, 1},
      // Two simulated hosts of two ranks: sum inside each host, Adasum across the two.
      {"hosts_2x2", TransportKind::kAuto, {"hostA", "hostA", "hostB", "hostB"}, 4, 2},
  };
}

INSTANTIATE_TEST_SUITE_P(Layouts, AdasumTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.label; });

TEST(Adasum, RefusesWhatItCannotCompute) {
  EXPECT_NE(adasumUnsupported(3, DataType::kFloat32), "");
  EXPECT_NE(adasumUnsupported(6, DataType::kFloat32), "");
  EXPECT_NE(adasumUnsupported(4, DataType::kInt32), "");
  EXPECT_EQ(adasumUnsupported(4, DataType::kFloat16), "");
  EXPECT_EQ(adasumUnsupported(1, DataType::kFloat64), "");
  RankSpec spec;
  spec.size = 3;
  auto outcomes = runRanksRaw(spec, [](Communicator& comm) {
    std::vector<float> buffer(10, 1.0f);
    try {
      adasumAllreduce(comm, buffer.data(), {10}, DataType::kFloat32);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kInvalidArgument &&
          std::string(e.what()).find("power-of-two") != std::string::npos)
        return;
    }
    throw std::runtime_error("no power-of-two error");
  });
  for (const auto& o : outcomes) EXPECT_EQ(o.exit_code, 0) << "rank " << o.rank << ": " << o.message;
}

}  // namespace
}  // namespace ronde::testing
