// The NCCL backend. Without a GPU: how NCCL's results and ronde's types and ops translate (these
// run in CI). With one GPU: every collective x type x op on a world of one rank against values
// computed on the host, and the error paths that one GPU can show: a rank that never joins is a
// timeout naming rank and host (ncclCommAbort ends the wait), an aborted communicator refuses
// later calls, and bad arguments are clear errors. NCCL will not run two ranks on one GPU, so
// multi-rank correctness needs a machine with two (docs/gpu.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/backend_registry.h"
#include "backends/nccl/nccl_translation.h"
#include "common/half.h"
#include "gpu_available.h"
#include "ronde/communicator.h"

namespace ronde {
namespace {

TEST(NcclTranslation, ResultCodesBecomeRondeErrorsNamingTheRank) {
  EXPECT_EQ(errorCodeForNccl(ncclRemoteError), ErrorCode::kPeerLost);
  EXPECT_EQ(errorCodeForNccl(ncclInvalidArgument), ErrorCode::kInvalidArgument);
  EXPECT_EQ(errorCodeForNccl(ncclInvalidUsage), ErrorCode::kInvalidArgument);
  EXPECT_EQ(errorCodeForNccl(ncclUnhandledCudaError), ErrorCode::kIo);
  EXPECT_EQ(errorCodeForNccl(ncclSystemError), ErrorCode::kIo);
  Error e = ncclError(ncclRemoteError, "ncclAllReduce", "rank 3 (host b)", "peer closed");
  EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
  const std::string text = e.what();
  EXPECT_NE(text.find("ncclAllReduce failed on rank 3 (host b)"), std::string::npos) << text;
  EXPECT_NE(text.find(ncclGetErrorString(ncclRemoteError)), std::string::npos) << text;
  EXPECT_NE(text.find("(NCCL: peer closed)"), std::string::npos) << text;
}

TEST(NcclTranslation, TypesAndOpsMapAsTheHostBackendsReduce) {
  EXPECT_EQ(ncclReduceType(DataType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(ncclReduceType(DataType::kBool), ncclUint8);
  EXPECT_THROW(ncclReduceType(DataType::kInt16), Error);
  EXPECT_EQ(ncclReduceOp(DataType::kFloat32, ReduceOp::kAverage), ncclSum);
  EXPECT_EQ(ncclReduceOp(DataType::kBool, ReduceOp::kSum), ncclMax);      // or
  EXPECT_EQ(ncclReduceOp(DataType::kBool, ReduceOp::kProduct), ncclMin);  // and
  EXPECT_EQ(ncclReduceOp(DataType::kInt32, ReduceOp::kProduct), ncclProd);
  EXPECT_THROW(ncclReduceOp(DataType::kFloat32, ReduceOp::kAdasum), Error);
}

struct Device {
  explicit Device(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 1), cudaSuccess); }
  ~Device() { cudaFree(ptr); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void* ptr = nullptr;
};

template <class T>
void toDevice(void* dst, const std::vector<T>& v) {
  ASSERT_EQ(cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

template <class T>
std::vector<T> fromDevice(const void* src, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

std::unique_ptr<Communicator> worldOfOne() {
  CommOptions options;
  options.cuda_device = 0;
  options.timeout = Duration(20000);
  return deviceBackend("nccl").create(options);
}

TEST(NcclWorldOfOne, AllreduceOfEveryTypeAndOpAgreesWithTheHost) {
  RONDE_SKIP_WITHOUT_GPU();
  auto comm = worldOfOne();
  EXPECT_EQ(comm->transportName(), "nccl");
  const size_t n = 1000;
  // One rank: every op leaves x, then the scales apply: int32 truncates twice, floats are exact
  // for these powers of two.
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::vector<int32_t> ints(n);
    for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int32_t>(i) - 500;
    Device in(n * 4), out(n * 4);
    toDevice(in.ptr, ints);
    comm->allreduce(in.ptr, out.ptr, n, DataType::kInt32, op, {0.5, 4.0});
    auto got = fromDevice<int32_t>(out.ptr, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], static_cast<int32_t>(std::trunc(ints[i] * 0.5)) * 4) << i;
    }
    std::vector<float> floats(n);
    for (size_t i = 0; i < n; ++i) floats[i] = static_cast<float>(i) * 0.25f - 100.0f;
    toDevice(in.ptr, floats);
    comm->allreduce(in.ptr, in.ptr, n, DataType::kFloat32, op, {2.0, 0.25});
    auto gotf = fromDevice<float>(in.ptr, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(gotf[i], floats[i] * 0.5f) << i;
  }
  for (DataType type : {DataType::kUInt8, DataType::kInt8, DataType::kInt64, DataType::kFloat16,
                        DataType::kBFloat16, DataType::kFloat64, DataType::kBool}) {
    std::vector<uint8_t> bytes(n * dataTypeSize(type));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i % 2);
    if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
      for (size_t i = 0; i < n; ++i) {
        const uint16_t v = type == DataType::kFloat16 ? floatToHalf(static_cast<float>(i % 7))
                                                      : floatToBfloat16(static_cast<float>(i % 7));
        std::memcpy(&bytes[2 * i], &v, 2);
      }
    }
    Device in(bytes.size()), out(bytes.size());
    toDevice(in.ptr, bytes);
    comm->allreduce(in.ptr, out.ptr, n, type, ReduceOp::kMax);
    EXPECT_EQ(fromDevice<uint8_t>(out.ptr, bytes.size()), bytes) << dataTypeName(type);
  }
}

TEST(NcclWorldOfOne, TheOtherCollectivesMoveTheBlocksTheHostExpects) {
  RONDE_SKIP_WITHOUT_GPU();
  auto comm = worldOfOne();
  std::vector<float> v = {1, 2, 3, 4, 5};
  Device a(20), b(20);
  toDevice(a.ptr, v);
  comm->allgatherv(a.ptr, b.ptr, {5}, DataType::kFloat32);
  EXPECT_EQ(fromDevice<float>(b.ptr, 5), v);
  comm->broadcast(b.ptr, 5, DataType::kFloat32, 0);
  EXPECT_EQ(fromDevice<float>(b.ptr, 5), v);
  toDevice(b.ptr, std::vector<float>(5, 0));
  comm->alltoallv(a.ptr, {5}, b.ptr, {5}, DataType::kFloat32);
  EXPECT_EQ(fromDevice<float>(b.ptr, 5), v);
  comm->reducescatter(a.ptr, b.ptr, {5}, DataType::kFloat32, ReduceOp::kAverage, {1.0, 2.0});
  EXPECT_EQ(fromDevice<float>(b.ptr, 5), (std::vector<float>{2, 4, 6, 8, 10}));
  comm->reducescatter(a.ptr, a.ptr, {5}, DataType::kFloat32, ReduceOp::kSum, {3.0, 1.0});
  EXPECT_EQ(fromDevice<float>(a.ptr, 5), (std::vector<float>{3, 6, 9, 12, 15}));
  comm->barrier();
  auto work = comm->allreduceAsync(a.ptr, a.ptr, 5, DataType::kFloat32, ReduceOp::kSum, {1, 2});
  work->wait(Duration(20000));
  EXPECT_EQ(fromDevice<float>(a.ptr, 5), (std::vector<float>{6, 12, 18, 24, 30}));
}

TEST(NcclWorldOfOne, BadArgumentsAreClearErrorsAndAbortRefusesLaterCalls) {
  RONDE_SKIP_WITHOUT_GPU();
  auto comm = worldOfOne();
  Device a(64);
  try {
    comm->allreduce(a.ptr, a.ptr, 4, DataType::kInt16, ReduceOp::kSum);
    FAIL() << "int16 was reduced";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  EXPECT_THROW(comm->broadcast(a.ptr, 4, DataType::kFloat32, 1), Error);
  EXPECT_THROW(comm->allgatherv(a.ptr, a.ptr, {1, 2}, DataType::kFloat32), Error);
  comm->allreduce(a.ptr, a.ptr, 4, DataType::kFloat32, ReduceOp::kSum);  // still usable
  comm->abort("test abort");
  try {
    comm->allreduce(a.ptr, a.ptr, 4, DataType::kFloat32, ReduceOp::kSum);
    FAIL() << "an aborted communicator ran a collective";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted);
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
  }
}

TEST(NcclFormation, ARankThatNeverJoinsIsATimeoutNamingRankAndHost) {
  RONDE_SKIP_WITHOUT_GPU();
  // Rank 1 of 2 registers its host in the store, then never forms NCCL: rank 0's nonblocking
  // init must end at the start timeout, with ncclCommAbort, instead of hanging.
  auto store = makeMemoryStore();
  store->setString("host/1", "hostb");
  CommOptions options;
  options.rank = 0;
  options.size = 2;
  options.store = store;
  options.hostname = "hosta";
  options.cuda_device = 0;
  options.start_timeout = Duration(3000);
  try {
    deviceBackend("nccl").create(options);
    FAIL() << "formed a 2-rank NCCL communicator alone";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    const std::string text = e.what();
    EXPECT_NE(text.find("rank 0 (host hosta)"), std::string::npos) << text;
    EXPECT_NE(text.find("NCCL was aborted"), std::string::npos) << text;
  }
  // The id rank 0 made is in the store under the communicator's key, 128 bytes.
  Bytes id;
  ASSERT_TRUE(store->tryGet("nccl/unique_id", &id));
  EXPECT_EQ(id.size(), sizeof(ncclUniqueId));
}

}  // namespace
}  // namespace ronde
