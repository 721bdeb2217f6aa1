// CUDA tensors on the process sets' device communicators (RONDE_GPU_OPERATIONS=nccl, and auto
// where every rank has its own GPU), on the CPU: the devices are host memory
// (runtime/device_host_memory.h, copies asynchronous and slowed, so that a collective started
// before the packing finished reads stale bytes) and a host communicator over the same ranks
// stands in for NCCL (support/device_runtime.cc), lacking int16 reductions as NCCL does. Every
// result is checked against a host reference. NCCL itself runs in scripts/device_check.sh.
#include <gtest/gtest.h>

#include "backends/backend_registry.h"
#include "runtime/device_host_memory.h"
#include "support/device_runtime.h"
#include "support/reference.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

using runtime::HostDeviceTensor;

Settings ncclSettings() {
  Settings s = runtimeTestSettings();
  s.gpu_operations = GpuOperations::kNccl;
  return s;
}

DeviceRanks withStandIn(int size = 2) {
  DeviceRanks ranks = slowDeviceRanks();
  ranks.size = size;
  ranks.stand_in_device_comms = true;
  return ranks;
}

// Nothing went through host memory except the int16 reductions the stand-in lacks.
void requireNoStagingBeyondInt16(DeviceWorld& world, const char* what) {
  REQUIRE(world.device_comms_built == 1, what << ": one device communicator was built, not "
                                               << world.device_comms_built.load());
  REQUIRE(world.device_collectives > 0, what << ": collectives ran on it");
}

TEST(DeviceCommRuntime, AllreduceEveryDtypeAndOpOneTensorAtATime) {
  Settings s = ncclSettings();
  s.fusion_threshold_bytes = 0;
  runDeviceRanks(
      s,
      [](DeviceWorld& world, RuntimeContext& ctx) {
        allreduceEverything(world, ctx);
        requireNoStagingBeyondInt16(world, "allreduce");
      },
      withStandIn());
}

TEST(DeviceCommRuntime, AllreduceEveryDtypeAndOpFused) {
  runDeviceRanks(
      ncclSettings(),
      [](DeviceWorld& world, RuntimeContext& ctx) {
        allreduceEverything(world, ctx, Submission::kInPairs);
        requireNoStagingBeyondInt16(world, "fused allreduce");
        REQUIRE(world.runtime->stats().collectives < world.runtime->stats().responses,
                "some tensors were fused");
      },
      withStandIn());
}

// Float tensors only: not one byte is staged through host memory.
TEST(DeviceCommRuntime, FloatAllreducesStageNothing) {
  runDeviceRanks(
      ncclSettings(),
      [](DeviceWorld& world, RuntimeContext& ctx) {
        std::vector<std::shared_ptr<HostDeviceTensor>> tensors;
        std::vector<std::shared_ptr<Handle>> handles;
        for (int k = 0; k < 6; ++k) {
          tensors.push_back(deviceTensor(ctx, DataType::kFloat32, {3000 + k}, k));
          Request r;
          r.name = "grad." + std::to_string(k);
          r.input = r.output = tensors.back();
          r.op = ReduceOp::kAverage;
          handles.push_back(world.runtime->enqueue(r));
        }
        for (int k = 0; k < 6; ++k) {
          handles[static_cast<size_t>(k)]->wait(std::chrono::seconds(60));
          for (size_t i = 0; i < tensors[static_cast<size_t>(k)]->numel(); ++i) {
            double want = expectedReduction(DataType::kFloat32, ReduceOp::kSum, ctx.size, i, k) /
                          ctx.size;
            REQUIRE(loadValue(DataType::kFloat32, tensors[static_cast<size_t>(k)]->data(), i) ==
                        want,
                    "tensor " << k << " element " << i);
          }
        }
        REQUIRE(world.stagingCopies() == 0,
                world.stagingCopies() << " copies went through host memory");
        REQUIRE(world.device_collectives > 0, "the device communicator ran them");
      },
      withStandIn());
}

TEST(DeviceCommRuntime, AllgatherBroadcastAlltoallReducescatterOneAtATime) {
  Settings s = ncclSettings();
  s.fusion_threshold_bytes = 0;
  runDeviceRanks(
      s,
      [](DeviceWorld& world, RuntimeContext& ctx) {
        otherKinds(world, ctx);
        REQUIRE(world.stagingCopies() == 0, "nothing staged");
      },
      withStandIn());
}

TEST(DeviceCommRuntime, AllgatherBroadcastAlltoallReducescatterFused) {
  runDeviceRanks(
      ncclSettings(),
      [](DeviceWorld& world, RuntimeContext& ctx) {
        otherKinds(world, ctx);
        REQUIRE(world.stagingCopies() == 0, "nothing staged");
      },
      withStandIn());
}

// Three ranks: uneven reducescatter blocks and allgather rows among more than two.
TEST(DeviceCommRuntime, ThreeRanks) {
  runDeviceRanks(
      ncclSettings(),
      [](DeviceWorld& world, RuntimeContext& ctx) {
        otherKinds(world, ctx);
        allreduceEverything(world, ctx);
      },
      withStandIn(3));
}

// A joined rank has no tensor to say which GPU it is on: it takes part in the device
// communicator's collectives with zeros, on the device it last used (or its local rank's).
TEST(DeviceCommRuntime, AJoinedRankTakesPartWithZeros) {
  for (int64_t fusion : {int64_t{0}, int64_t{64} << 20}) {
    Settings s = ncclSettings();
    s.fusion_threshold_bytes = fusion;
    runDeviceRanks(
        s,
        [](DeviceWorld& world, RuntimeContext& ctx) {
          averageBesideAJoinedRank(world, ctx);
          REQUIRE(world.device_comms_built == 1, "the communicator was built on every rank");
        },
        withStandIn());
  }
}

// One device communicator per process set, built by its members alone.
TEST(DeviceCommRuntime, EachProcessSetHasItsOwnDeviceCommunicator) {
  runDeviceRanks(
      ncclSettings(),
      [](DeviceWorld& world, RuntimeContext& ctx) {
        const int set = world.runtime->addProcessSet({0, 2});
        auto world_tensor = deviceTensor(ctx, DataType::kFloat32, {1000}, 1);
        Request everyone;
        everyone.name = "everyone";
        everyone.input = everyone.output = world_tensor;
        auto h_world = world.runtime->enqueue(everyone);
        std::shared_ptr<HostDeviceTensor> set_tensor;
        std::shared_ptr<Handle> h_set;
        if (ctx.rank != 1) {
          set_tensor = deviceTensor(ctx, DataType::kFloat32, {777}, 2);
          Request in_set;
          in_set.name = "in.set";
          in_set.input = in_set.output = set_tensor;
          in_set.process_set = set;
          h_set = world.runtime->enqueue(in_set);
        }
        h_world->wait(std::chrono::seconds(60));
        for (size_t i = 0; i < world_tensor->numel(); ++i) {
          REQUIRE(loadValue(DataType::kFloat32, world_tensor->data(), i) ==
                      expectedReduction(DataType::kFloat32, ReduceOp::kSum, 3, i, 1),
                  "world element " << i);
        }
        if (h_set) {
          h_set->wait(std::chrono::seconds(60));
          for (size_t i = 0; i < set_tensor->numel(); ++i) {
            double want = inputValue(DataType::kFloat32, 0, i, 2) +
                          inputValue(DataType::kFloat32, 2, i, 2);
            REQUIRE(loadValue(DataType::kFloat32, set_tensor->data(), i) == want,
                    "set element " << i);
          }
        }
        const int expected = ctx.rank == 1 ? 1 : 2;
        REQUIRE(world.device_comms_built == expected,
                "rank " << ctx.rank << " built " << world.device_comms_built.load()
                        << " device communicators, expected " << expected);
        world.runtime->removeProcessSet(set);
      },
      withStandIn(3));
}

// A process's CUDA tensors of one set must be on the GPU its device communicator is on: a
// tensor elsewhere fails alone, and the runtime goes on.
TEST(DeviceCommRuntime, ATensorOnAnotherGpuFailsAlone) {
  runDeviceRanks(
      ncclSettings(),
      [](DeviceWorld& world, RuntimeContext& ctx) {
        auto first = deviceTensor(ctx, DataType::kFloat32, {100}, 1);
        Request r;
        r.name = "first";
        r.input = r.output = first;
        world.runtime->enqueue(r)->wait(std::chrono::seconds(60));

        auto elsewhere = std::make_shared<HostDeviceTensor>(
            DataType::kFloat32, std::vector<int64_t>{100}, Device{Device::Kind::kCuda, 7});
        Request bad;
        bad.name = "elsewhere";
        bad.input = bad.output = elsewhere;
        try {
          world.runtime->enqueue(bad)->wait(std::chrono::seconds(60));
          REQUIRE(false, "a tensor on cuda:7 ran on the communicator of cuda:" << ctx.rank);
        } catch (const Error& e) {
          const std::string what = e.what();
          REQUIRE(what.find("'elsewhere' is on cuda:7") != std::string::npos, what);
          REQUIRE(what.find("is on cuda:" + std::to_string(ctx.rank)) != std::string::npos, what);
        }
        auto again = deviceTensor(ctx, DataType::kFloat32, {100}, 3);
        Request fine;
        fine.name = "again";
        fine.input = fine.output = again;
        world.runtime->enqueue(fine)->wait(std::chrono::seconds(60));
        for (size_t i = 0; i < 100; ++i) {
          REQUIRE(loadValue(DataType::kFloat32, again->data(), i) ==
                      expectedReduction(DataType::kFloat32, ReduceOp::kSum, ctx.size, i, 3),
                  "element " << i);
        }
      },
      withStandIn());
}

// RONDE_GPU_HIERARCHICAL_ALLREDUCE with 2 hosts of 2 ranks: reduce-scatter on the device inside
// each host, each share across hosts through host memory, allgather inside each host.
TEST(DeviceCommRuntime, HierarchicalAllreduceAcrossTwoHosts) {
  for (int64_t fusion : {int64_t{0}, int64_t{64} << 20}) {
    Settings s = ncclSettings();
    s.gpu_hierarchical_allreduce = true;
    s.gpu_staging_chunk_bytes = 4096;  // the shares cross hosts in several chunks
    s.fusion_threshold_bytes = fusion;
    DeviceRanks ranks = withStandIn(4);
    ranks.hosts = {"a", "a", "b", "b"};
    runDeviceRanks(
        s,
        [](DeviceWorld& world, RuntimeContext& ctx) {
          allreduceEverything(world, ctx);
          REQUIRE(world.device_reducescatters > 0, "the allreduces were reduce-scattered");
          REQUIRE(world.device_comms_built == 2,
                  "a device communicator over the set and one over this host's ranks, not "
                      << world.device_comms_built.load());
          REQUIRE(world.stagingCopies() > 0, "the shares crossed hosts through host memory");
          otherKinds(world, ctx);  // the flat device communicator still serves the rest
        },
        ranks);
  }
}

// One host, or one rank per host: nothing to split, so the flat allreduce runs.
TEST(DeviceCommRuntime, HierarchicalAllreduceFallsBackToFlatWhereALevelIsOneRank) {
  Settings s = ncclSettings();
  s.gpu_hierarchical_allreduce = true;
  for (std::vector<std::string> hosts :
       {std::vector<std::string>{}, std::vector<std::string>{"a", "b"}}) {
    DeviceRanks ranks = withStandIn(2);
    ranks.hosts = hosts;
    runDeviceRanks(
        s,
        [](DeviceWorld& world, RuntimeContext& ctx) {
          allreduceEverything(world, ctx);
          REQUIRE(world.device_reducescatters == 0, "no reduce-scatter: the flat allreduce ran");
          REQUIRE(world.device_comms_built == 1, "only the set's device communicator");
        },
        ranks);
  }
}

// A rank whose device communicator cannot be formed (NCCL's init failing, say) fails, and so
// does every other rank waiting to form it with that rank, promptly and naming the rank: no
// one waits out the start timeout.
TEST(DeviceCommRuntime, ADeviceCommunicatorFailingToFormOnOneRankFailsEveryRank) {
  DeviceRanks ranks = withStandIn();
  ranks.device_comm_fails_on = 1;
  Settings s = ncclSettings();
  s.start_timeout_seconds = 120;
  runDeviceRanks(
      s,
      [](DeviceWorld& world, RuntimeContext& ctx) {
        Request r;
        r.name = "first";
        r.input = r.output = deviceTensor(ctx, DataType::kFloat32, {100}, 1);
        const auto began = std::chrono::steady_clock::now();
        try {
          world.runtime->enqueue(r)->wait(std::chrono::seconds(90));
          REQUIRE(false, "the allreduce succeeded without a device communicator on rank 1");
        } catch (const Error& e) {
          const std::string what = e.what();
          REQUIRE(what.find("rank 1") != std::string::npos, "names rank 1: " << what);
          REQUIRE(what.find("injected failure") != std::string::npos, what);
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        REQUIRE(seconds < 30, "failed after " << seconds << " s, not at once");
        world.runtime->shutdown();
      },
      ranks);
}

// Two ranks of a host on one GPU cannot both join an NCCL communicator: under auto their set is
// staged through host memory (and no device communicator is built); under nccl it is an error
// naming both ranks.
DeviceRanks sharingOneGpu() { return withStandIn(); }

std::shared_ptr<HostDeviceTensor> onGpuZero(DataType type, int64_t n, int rank, int salt) {
  auto t = std::make_shared<HostDeviceTensor>(type, std::vector<int64_t>{n},
                                              Device{Device::Kind::kCuda, 0});
  for (size_t i = 0; i < t->numel(); ++i)
    storeValue(type, t->data(), i, inputValue(type, rank, i, salt));
  return t;
}

TEST(DeviceCommRuntime, RanksSharingAGpuAreStagedUnderAuto) {
  Settings s = runtimeTestSettings();
  s.gpu_operations = GpuOperations::kAuto;
  s.gpu_staging_chunk_bytes = 4096;
  runDeviceRanks(
      s,
      [](DeviceWorld& world, RuntimeContext& ctx) {
        auto t = onGpuZero(DataType::kFloat32, 5000, ctx.rank, 4);
        Request r;
        r.name = "shared.gpu";
        r.input = r.output = t;
        world.runtime->enqueue(r)->wait(std::chrono::seconds(60));
        for (size_t i = 0; i < t->numel(); ++i) {
          REQUIRE(loadValue(DataType::kFloat32, t->data(), i) ==
                      expectedReduction(DataType::kFloat32, ReduceOp::kSum, ctx.size, i, 4),
                  "element " << i);
        }
        REQUIRE(world.device_comms_built == 0, "no device communicator for ranks sharing a GPU");
        REQUIRE(world.stagingCopies() > 0, "staged through host memory");
      },
      sharingOneGpu());
}

TEST(DeviceCommRuntime, RanksSharingAGpuAreAnErrorUnderNccl) {
  runDeviceRanks(
      ncclSettings(),
      [](DeviceWorld& world, RuntimeContext& ctx) {
        Request r;
        r.name = "shared.gpu";
        r.input = r.output = onGpuZero(DataType::kFloat32, 100, ctx.rank, 5);
        try {
          world.runtime->enqueue(r)->wait(std::chrono::seconds(60));
          REQUIRE(false, "two ranks on one GPU were accepted under RONDE_GPU_OPERATIONS=nccl");
        } catch (const Error& e) {
          const std::string what = e.what();
          REQUIRE(what.find("ranks 0 and 1") != std::string::npos, what);
          REQUIRE(what.find("share one GPU") != std::string::npos, what);
          REQUIRE(what.find("RONDE_GPU_OPERATIONS=host") != std::string::npos, what);
        }
        world.runtime->shutdown();
      },
      sharingOneGpu());
}

// RONDE_GPU_OPERATIONS=nccl in a build without NCCL is refused at init, saying why; in a build
// with it, init succeeds (the communicator is built at the first CUDA collective).
TEST(DeviceCommRuntime, NcclIsRefusedAtInitOnlyWhereThisBuildLacksIt) {
  RankSpec spec;
  spec.size = 1;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        rt->shutdown();
        try {
          rt = Runtime::init(ncclSettings(), ctx.communicator("nccl", 0, 1));
          REQUIRE(deviceBackendBuilt("nccl"), "RONDE_GPU_OPERATIONS=nccl accepted without NCCL");
        } catch (const Error& e) {
          REQUIRE(!deviceBackendBuilt("nccl"), "refused although NCCL is built: " << e.what());
          REQUIRE(e.code() == ErrorCode::kConfig, e.what());
          REQUIRE(std::string(e.what()).find("RONDE_GPU_OPERATIONS=nccl") != std::string::npos,
                  e.what());
          rt.reset();
        }
      });
}

}  // namespace
}  // namespace ronde::testing
