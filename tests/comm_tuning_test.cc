// Communicator::setTuning between collectives: every rank changes the algorithm knobs (size
// band cutoff, shm and TCP chunks, hierarchical on/off) before the same collective, and every
// result stays equal to the independent reference, on shared memory, TCP and simulated hosts,
// at 2 and 3 ranks. Bad values are refused on the calling rank; ranks that apply different
// knobs fail with a mismatch instead of mixing algorithms.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sstream>
#include <stdexcept>

#include "support/multiprocess.h"
#include "support/reference.h"

namespace ronde::testing {
namespace {

constexpr int64_t kSlotBytes = 64 * 1024;  // the shm slot: the largest chunk setTuning accepts

struct Layout {
  std::string label;
  TransportKind transport;
  std::vector<std::string> hosts;
  int size;
};

std::string layoutName(const ::testing::TestParamInfo<Layout>& info) { return info.param.label; }

// Settings spanning both sides of every cutoff: a count of 70001 floats crosses several
// chunks at 4 KiB and sits in the latency band only at a 16 MiB cutoff.
std::vector<CommTuning> tuningSequence() {
  std::vector<CommTuning> all;
  const int64_t smalls[] = {0, 4096, 64 * 1024, 16 << 20};
  const int64_t shm_chunks[] = {4096, 12345, kSlotBytes};
  const int64_t tcp_chunks[] = {4096, 100000, 1 << 20};
  int i = 0;
  for (int64_t small : smalls) {
    for (int64_t shm : shm_chunks) {
      CommTuning t;
      t.small_allreduce_bytes = small;
      t.shm_chunk_bytes = shm;
      t.tcp_chunk_bytes = tcp_chunks[i % 3];
      t.hierarchical_allreduce = i % 2 == 0;
      t.shm_direct_read = (i / 2) % 2 == 0;  // both shm algorithms of the large band
      t.hierarchical_allgather = (i / 3) % 2 == 0;
      t.hierarchical_reducescatter = (i / 4) % 2 == 0;
      all.push_back(t);
      ++i;
    }
  }
  return all;
}

std::string describe(const CommTuning& t) {
  std::ostringstream out;
  out << "small " << t.small_allreduce_bytes << ", shm chunk " << t.shm_chunk_bytes
      << ", tcp chunk " << t.tcp_chunk_bytes << ", hierarchical " << t.hierarchical_allreduce
      << ", direct read " << t.shm_direct_read << ", hierarchical allgather "
      << t.hierarchical_allgather << ", hierarchical reduce-scatter "
      << t.hierarchical_reducescatter;
  return out.str();
}

void checkAllreduce(Communicator& comm, DataType type, ReduceOp op, size_t count, int salt,
                    const std::string& where) {
  std::vector<char> buffer(std::max<size_t>(1, count * sizeOf(type)));
  for (size_t i = 0; i < count; ++i)
    storeValue(type, buffer.data(), i, inputValue(type, comm.rank(), i, salt));
  comm.allreduce(buffer.data(), buffer.data(), count, type, op);
  for (size_t i = 0; i < count; ++i) {
    const double want = expectedReduction(type, op, comm.size(), i, salt);
    const double got = loadValue(type, buffer.data(), i);
    const bool ok = op == ReduceOp::kAverage ? std::fabs(got - want) < 1e-6 : got == want;
    if (!ok) {
      std::ostringstream out;
      out << comm.describeRank(comm.rank()) << ": " << where << ": " << dataTypeName(type) << "/"
          << reduceOpName(op) << "/" << count << " element " << i << ": got " << got << ", want "
          << want;
      throw std::runtime_error(out.str());
    }
  }
}

void checkAllgather(Communicator& comm, size_t count, const std::string& where) {
  std::vector<int32_t> mine(count), all(count * static_cast<size_t>(comm.size()));
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(comm.rank() * 1000003 + i);
  comm.allgather(mine.data(), all.data(), count, DataType::kInt32);
  for (int r = 0; r < comm.size(); ++r) {
    for (size_t i = 0; i < count; ++i) {
      if (all[static_cast<size_t>(r) * count + i] != static_cast<int32_t>(r * 1000003 + i)) {
        throw std::runtime_error(comm.describeRank(comm.rank()) + ": " + where +
                                 ": allgather block " + std::to_string(r) + " element " +
                                 std::to_string(i));
      }
    }
  }
}

class CommTuningTest : public ::testing::TestWithParam<Layout> {
 protected:
  RankSpec spec() const {
    RankSpec s;
    s.size = GetParam().size;
    s.transport = GetParam().transport;
    s.hosts = GetParam().hosts;
    s.timeout_seconds = 300;
    s.shm_chunk_bytes = kSlotBytes;
    return s;
  }
};

TEST_P(CommTuningTest, ResultsStayExactWhileKnobsChangeBetweenCollectives) {
  runRanks(spec(), [](Communicator& comm) {
    if (!comm.tunable()) throw std::runtime_error("the native communicator must be tunable");
    int step = 0;
    for (const CommTuning& wanted : tuningSequence()) {
      comm.setTuning(wanted);
      const CommTuning now = comm.tuning();
      CommTuning expected = wanted;
      expected.shm_chunk_bytes = wanted.shm_chunk_bytes / 64 * 64;  // whole cache lines
      if (!(now == expected)) {
        throw std::runtime_error("tuning() reports " + describe(now) + " after setting " +
                                 describe(wanted));
      }
      const std::string where = "tuning #" + std::to_string(step) + " (" + describe(wanted) + ")";
      for (size_t count :
           {size_t{0}, size_t{1}, size_t{1001}, size_t{3 * 4096 + 7}, size_t{70001}}) {
        checkAllreduce(comm, DataType::kFloat32, ReduceOp::kSum, count, step, where);
        checkAllreduce(comm, DataType::kInt64, ReduceOp::kMax, count, step + 1, where);
      }
      checkAllreduce(comm, DataType::kFloat64, ReduceOp::kAverage, 20000, step, where);
      checkAllgather(comm, 5000, where);
      ++step;
    }
    // The last one changes nothing but the hierarchical flag, then flips it back.
    CommTuning t = comm.tuning();
    for (bool hierarchical : {!t.hierarchical_allreduce, t.hierarchical_allreduce}) {
      t.hierarchical_allreduce = hierarchical;
      comm.setTuning(t);
      const bool shown = comm.transportName().find("hierarchical") != std::string::npos;
      if (comm.crossSize() > 1 && shown != hierarchical)
        throw std::runtime_error("hierarchical " + std::to_string(hierarchical) +
                                 " but transport " + comm.transportName());
      checkAllreduce(comm, DataType::kFloat32, ReduceOp::kSum, 70001, 99, "hierarchical flip");
    }
  });
}

TEST_P(CommTuningTest, OutOfRangeValuesAreRefusedAndLeaveTheKnobsAlone) {
  runRanks(spec(), [](Communicator& comm) {
    const CommTuning before = comm.tuning();
    auto refused = [&](CommTuning bad, const char* what) {
      try {
        comm.setTuning(bad);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kInvalidArgument)
          throw std::runtime_error(std::string(what) + ": wrong code: " + e.what());
        if (!(comm.tuning() == before))
          throw std::runtime_error(std::string(what) + " changed the knobs");
        return;
      }
      throw std::runtime_error(std::string(what) + " was accepted");
    };
    CommTuning bad = before;
    bad.small_allreduce_bytes = -1;
    refused(bad, "a negative cutoff");
    bad = before;
    bad.tcp_chunk_bytes = 100;
    refused(bad, "a 100-byte TCP chunk");
    bad = before;
    bad.shm_chunk_bytes = 1000;
    refused(bad, "a 1000-byte shm chunk");
    if (comm.transportName().find("shm") != std::string::npos) {
      bad = before;
      bad.shm_chunk_bytes = kSlotBytes * 2;
      refused(bad, "a shm chunk beyond the slot");
    }
    checkAllreduce(comm, DataType::kFloat32, ReduceOp::kSum, 70001, 3, "after refusals");
  });
}

TEST_P(CommTuningTest, RanksWithDifferentKnobsFailWithAMismatch) {
  RankSpec s = spec();
  s.collective_timeout_ms = 20000;
  std::vector<ChildOutcome> outcomes = runRanksRaw(s, [](Communicator& comm) {
    CommTuning t = comm.tuning();
    if (comm.rank() == 1) t.tcp_chunk_bytes += 4096;  // the smallest change: one field
    comm.setTuning(t);
    std::vector<float> data(70001, 1.0f);
    try {
      comm.allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kMismatch)
        throw std::runtime_error(std::string("expected a mismatch, got: ") + e.what());
      if (std::string(e.what()).find("tuning") == std::string::npos)
        throw std::runtime_error(std::string("the mismatch does not name the tuning: ") + e.what());
      return;
    }
    throw std::runtime_error("different knobs went unnoticed");
  });
  for (const ChildOutcome& o : outcomes) {
    EXPECT_EQ(o.exit_code, 0) << "rank " << o.rank << ": " << o.message;
  }
}

// Root may read any process's memory (CAP_SYS_PTRACE): without it, not a non-dumpable one.
void dropPtraceCapability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) throw std::runtime_error("capget failed");
  const unsigned bit = 1u << (CAP_SYS_PTRACE % 32);
  data[CAP_SYS_PTRACE / 32].effective &= ~bit;
  data[CAP_SYS_PTRACE / 32].permitted &= ~bit;
  if (::syscall(SYS_capset, &header, data) != 0) throw std::runtime_error("capset failed");
}

// A rank whose memory the others may not read (not dumpable: ptrace and cross-memory attach
// refuse it). The start-up probe must then choose staging on every rank alike, or the first
// large allreduce would mix algorithms; results stay exact.
TEST(CommTuningDirectRead, ARankOthersCannotReadMakesEveryRankStage) {
  for (int size : {2, 3}) {
    RankSpec s;
    s.size = size;
    s.shm_chunk_bytes = kSlotBytes;
    std::vector<ChildOutcome> outcomes = runProcessesRaw(s, [&](int rank, int port) {
      dropPtraceCapability();
      if (rank == size - 1 && ::prctl(PR_SET_DUMPABLE, 0) != 0)
        throw std::runtime_error("prctl(PR_SET_DUMPABLE) failed");
      auto comm = makeCommunicator(s, rank, size, connectStore(s, port));
      for (size_t count : {size_t{70001}, size_t{300000}}) {
        checkAllreduce(*comm, DataType::kFloat32, ReduceOp::kSum, count, 5, "not dumpable");
        checkAllreduce(*comm, DataType::kFloat64, ReduceOp::kAverage, count, 6, "not dumpable");
      }
    });
    for (const ChildOutcome& o : outcomes) {
      EXPECT_EQ(o.exit_code, 0) << size << " ranks, rank " << o.rank << ": " << o.message;
    }
  }
}

// Where CommOptions::shm_direct_read is unset, each host times both shared-memory allreduces
// at construction: every rank must start with the same verdict (it is part of every call's
// descriptor), and a sub-communicator must inherit it rather than time again. Where it is set,
// the communicator starts with it, on every layout.
TEST(CommTuningDirectRead, TheTimedChoiceIsSharedByEveryRankAndInherited) {
  const std::vector<std::vector<std::string>> layouts = {{}, {"hostA", "hostA", "hostB", "hostB"}};
  for (const auto& hosts : layouts) {
    for (std::optional<bool> given : {std::optional<bool>{}, std::optional<bool>{true},
                                      std::optional<bool>{false}}) {
      RankSpec s;
      s.size = hosts.empty() ? 2 : 4;
      s.hosts = hosts;
      s.shm_direct_read = given;
      runRanks(s, [given](Communicator& comm) {
        const int32_t mine = comm.tuning().shm_direct_read ? 1 : 0;
        if (given && mine != (*given ? 1 : 0))
          throw std::runtime_error("CommOptions::shm_direct_read was not the starting knob");
        std::vector<int32_t> all(static_cast<size_t>(comm.size()));
        comm.allgather(&mine, all.data(), 1, DataType::kInt32);
        for (int32_t v : all) {
          if (v != mine) throw std::runtime_error("ranks started with different shm algorithms");
        }
        std::vector<int> everyone(static_cast<size_t>(comm.size()));
        for (int r = 0; r < comm.size(); ++r) everyone[static_cast<size_t>(r)] = r;
        auto sub = comm.subCommunicator(everyone, "sub");
        if (sub->tuning().shm_direct_read != comm.tuning().shm_direct_read)
          throw std::runtime_error("the sub-communicator did not inherit the verdict");
        checkAllreduce(*sub, DataType::kFloat32, ReduceOp::kSum, 300000, 7, "sub-communicator");
      });
    }
  }
}

std::vector<Layout> layouts() {
  return {
      {"shm_2", TransportKind::kAuto, {}, 2},
      {"shm_3", TransportKind::kAuto, {}, 3},
      {"tcp_2", TransportKind::kTcp, {}, 2},
      {"tcp_3", TransportKind::kTcp, {}, 3},
      // Shared memory inside, TCP across: the hierarchical flag switches algorithms here.
      {"hosts_2x2", TransportKind::kAuto, {"hostA", "hostA", "hostB", "hostB"}, 4},
  };
}

INSTANTIATE_TEST_SUITE_P(Layouts, CommTuningTest, ::testing::ValuesIn(layouts()), layoutName);

}  // namespace
}  // namespace ronde::testing
