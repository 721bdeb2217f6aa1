// The MPI backend under mpirun: every collective check of collectives_test.cc (the same bodies,
// the same independent reference), the backend's choice, and a mismatch failing every rank.
// ctest starts it with `mpirun -np 2` and `-np 3` and RONDE_CPU_OPERATIONS=mpi.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "support/collective_checks.h"

namespace ronde::testing {
namespace {

class MpiBackend : public ::testing::Test {
 protected:
  // One communicator for the checks, as a training job keeps one.
  static void SetUpTestSuite() { comm_ = Communicator::fromEnvironment().release(); }
  static void TearDownTestSuite() {
    delete comm_;
    comm_ = nullptr;
  }
  static Communicator& comm() { return *comm_; }
  static Communicator* comm_;
};
Communicator* MpiBackend::comm_ = nullptr;

TEST_F(MpiBackend, IsChosenAndSeesTheWholeJob) {
  EXPECT_EQ(comm().transportName(), "mpi");
  EXPECT_EQ(comm().size(), std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  EXPECT_EQ(comm().rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  EXPECT_EQ(comm().localSize(), comm().size());  // mpirun -np N on this host
  EXPECT_EQ(comm().crossSize(), 1);
  EXPECT_NE(comm().store(), nullptr);  // liveness heartbeats and abort reasons use it
}

TEST_F(MpiBackend, AllreduceEveryDtypeOpAndSize) { checkAllreduceEveryDtypeOpAndSize(comm()); }
TEST_F(MpiBackend, AllreduceLargeBuffersAndScaling) {
  checkAllreduceLargeBuffersAndScaling(comm());
}
TEST_F(MpiBackend, AllreduceLargeUnscaled) { checkAllreduceLargeUnscaled(comm()); }
TEST_F(MpiBackend, AllgathervUnevenCounts) { checkAllgathervUnevenCounts(comm()); }
TEST_F(MpiBackend, BroadcastFromEveryRoot) { checkBroadcastFromEveryRoot(comm()); }
TEST_F(MpiBackend, AlltoallvWithSplits) { checkAlltoallvWithSplits(comm()); }
TEST_F(MpiBackend, ReducescatterUneven) { checkReducescatterUneven(comm()); }
TEST_F(MpiBackend, BarrierAndAsyncInOrder) { checkBarrierAndAsyncInOrder(comm()); }

// A disagreement is found before any data moves, so nothing is left pending: the next
// communicator (the next generation) works.
TEST(MpiBackendErrors, CountMismatchFailsEveryRankThenANewCommunicatorWorks) {
  {
    auto comm = Communicator::fromEnvironment();
    std::vector<float> data(11, 1.0f);
    const size_t count = comm->rank() == 1 ? 11 : 10;
    try {
      comm->allreduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum);
      ADD_FAILURE() << "a count mismatch went unnoticed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("element count"), std::string::npos) << e.what();
    }
    try {
      comm->barrier();
      ADD_FAILURE() << "an aborted communicator ran a barrier";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
    }
  }
  auto next = Communicator::fromEnvironment();
  int value = next->rank() + 1;
  next->allreduce(&value, &value, 1, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(value, next->size() * (next->size() + 1) / 2);
}

TEST(MpiBackendErrors, BadArgumentsAreClearErrors) {
  auto comm = Communicator::fromEnvironment();
  float x = 1;
  try {
    comm->broadcast(&x, 1, DataType::kFloat32, comm->size());
    ADD_FAILURE() << "a broadcast from a rank past the job ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("root"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ronde::testing
