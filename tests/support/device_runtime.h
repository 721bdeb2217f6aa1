// Runtimes whose CUDA devices are host memory (runtime/device_host_memory.h), for the tests of
// both device paths: host staging (device_staging_test.cc) and device communicators
// (device_comm_test.cc), where a host communicator stands in for NCCL. The collective bodies
// here check every result against a host reference and run under either path.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/communicator_set.h"
#include "runtime/device_host_memory.h"
#include "support/runtime_harness.h"

namespace ronde::testing {

struct DeviceWorld {
  std::unique_ptr<Runtime> runtime;
  std::mutex mutex;
  std::vector<runtime::HostMemoryDevice*> devices;  // made by the runtime's DeviceSet
  std::atomic<int> device_comms_built{0};         // by the stand-in factory, on this rank
  std::atomic<int> device_collectives{0};         // run on them, on this rank
  std::atomic<int> device_reducescatters{0};      // of which reducescatters

  std::vector<uintptr_t> waited();
  std::vector<uintptr_t> finished();
  uint64_t stagingCopies();  // host <-> device copies of every device of this rank
};

using DeviceBody = std::function<void(DeviceWorld& world, RuntimeContext& ctx)>;

// RONDE_GPU_OPERATIONS=host, with a small staging chunk, so that the staged tensors cross
// several chunks.
Settings stagingSettings();

struct DeviceRanks {
  int size = 2;
  std::vector<std::string> hosts;  // forced host of each rank (RankSpec::hosts); empty: one
  runtime::HostMemoryDeviceOptions options;  // every device's (slowed copies by default)
  int failing_rank = -1;                     // >= 0: options.fail_at_copy on that rank alone
  // Device communicators stand in as host communicators over the same ranks (as NCCL would be
  // built under RONDE_GPU_OPERATIONS=nccl or auto); off: the runtime has no device backend.
  bool stand_in_device_comms = false;
  // Reductions the stand-in lacks, as NCCL lacks int16.
  bool stand_in_lacks_int16 = true;
  // >= 0: on this rank, building the device communicator fails (as NCCL's formation can).
  int device_comm_fails_on = -1;
};
DeviceRanks slowDeviceRanks();

// Replaces the harness's runtime by one whose CUDA devices are host memory, and runs `body`.
void runDeviceRanks(const Settings& settings, const DeviceBody& body,
                    DeviceRanks ranks = slowDeviceRanks());

// Rank r's tensors live on "cuda:r".
Device deviceOf(const RuntimeContext& ctx);
std::shared_ptr<runtime::HostDeviceTensor> deviceTensor(const RuntimeContext& ctx, DataType type,
                                                        std::vector<int64_t> shape, int salt);

// How allreduceEverything submits its two tensors of each dtype and op: one by one, or as a
// group of two, which every rank releases in one cycle, so that the pair is fused whatever the
// machine's load (which requests are ready at a cycle is otherwise up to the scheduler).
enum class Submission { kOneByOne, kInPairs };

// Every dtype x op, each its own request, all in flight at once; checks values, that each
// request's ready event was waited on once and its stream made to wait for the output once.
void allreduceEverything(DeviceWorld& world, RuntimeContext& ctx,
                         Submission submission = Submission::kOneByOne);
// Allgather (uneven rows), broadcast, alltoall and reducescatter, checked the same way.
void otherKinds(DeviceWorld& world, RuntimeContext& ctx);
// Rank 1 joins at once; rank 0 averages three tensors with a prescale of 2, which must come out
// as its own values (the joined rank gave zeros), then joins too. Returns on both ranks.
void averageBesideAJoinedRank(DeviceWorld& world, RuntimeContext& ctx);

}  // namespace ronde::testing
