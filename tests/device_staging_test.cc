// Host staging of CUDA tensors, on the CPU: the executor's device path, with host memory
// standing in for a device (runtime/device_host_memory.h), asynchronous as a GPU's copies are
// and slowed per copy so that a missing wait reads stale bytes, under RONDE_GPU_OPERATIONS=host
// (stagingSettings). The chunk pipeline itself is tested in
// device_staging_pipeline_test.cc, the device communicator path in device_comm_test.cc; the
// same code runs on a GPU in scripts/device_check.sh (tests/gpu/runtime_staging_gpu_test.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "runtime/device_host_memory.h"
#include "support/device_runtime.h"
#include "support/reference.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"
#include "support/slow_device.h"

namespace ronde::testing {
namespace {

using runtime::HostDeviceTensor;

TEST(DeviceRuntime, AllreduceEveryDtypeAndOpOneTensorAtATime) {
  Settings s = stagingSettings();
  s.fusion_threshold_bytes = 0;
  runDeviceRanks(s,
                 [](DeviceWorld& world, RuntimeContext& ctx) { allreduceEverything(world, ctx); });
}

TEST(DeviceRuntime, AllreduceEveryDtypeAndOpFused) {
  runDeviceRanks(stagingSettings(), [](DeviceWorld& world, RuntimeContext& ctx) {
    allreduceEverything(world, ctx, Submission::kInPairs);
    REQUIRE(world.runtime->stats().collectives < world.runtime->stats().responses,
            "some tensors were fused");
  });
}

TEST(DeviceRuntime, AllgatherBroadcastAlltoallReducescatterOneAtATime) {
  Settings s = stagingSettings();
  s.fusion_threshold_bytes = 0;
  runDeviceRanks(s, otherKinds);
}

TEST(DeviceRuntime, AllgatherBroadcastAlltoallReducescatterFused) {
  runDeviceRanks(stagingSettings(), otherKinds);
}

TEST(DeviceRuntime, ACopyFailingOnOneRankFailsEveryRankNamingIt) {
  DeviceRanks ranks = slowDeviceRanks();
  ranks.options.fail_at_copy = 3;
  ranks.failing_rank = 1;
  runDeviceRanks(
      stagingSettings(),
      [](DeviceWorld& world, RuntimeContext& ctx) {
        auto t = deviceTensor(ctx, DataType::kFloat32, {10000}, 1);
        Request r;
        r.name = "doomed";
        r.input = r.output = t;
        auto h = world.runtime->enqueue(r);
        try {
          h->wait(std::chrono::seconds(60));
          REQUIRE(false, "the allreduce succeeded despite the failed copy");
        } catch (const Error& e) {
          std::string what = e.what();
          REQUIRE(what.find("rank 1") != std::string::npos, "the error names rank 1: " << what);
          if (ctx.rank == 1) REQUIRE(what.find("injected copy failure") != std::string::npos, what);
        }
        world.runtime->shutdown();
      },
      ranks);
}

TEST(DeviceRuntime, OutputsOnAnotherDeviceOrOfAnotherSizeFailThatRequestAlone) {
  runDeviceRanks(stagingSettings(), [](DeviceWorld& world, RuntimeContext& ctx) {
    auto in = deviceTensor(ctx, DataType::kFloat32, {100}, 1);
    Request r;
    r.name = "elsewhere";
    r.input = in;
    r.output = std::make_shared<HostDeviceTensor>(DataType::kFloat32, std::vector<int64_t>{100},
                                                  Device{Device::Kind::kCuda, 5});
    auto h = world.runtime->enqueue(r);
    try {
      h->wait(std::chrono::seconds(60));
      REQUIRE(false, "an output on another device was accepted");
    } catch (const Error& e) {
      REQUIRE(std::string(e.what()).find("not on the input's device") != std::string::npos,
              e.what());
    }
    // The runtime goes on.
    auto t = deviceTensor(ctx, DataType::kFloat32, {100}, 2);
    Request ok;
    ok.name = "fine";
    ok.input = ok.output = t;
    world.runtime->enqueue(ok)->wait(std::chrono::seconds(60));
    for (size_t i = 0; i < 100; ++i) {
      REQUIRE(loadValue(DataType::kFloat32, t->data(), i) ==
                  expectedReduction(DataType::kFloat32, ReduceOp::kSum, ctx.size, i, 2),
              "element " << i);
    }
  });
}

TEST(DeviceRuntime, HostAndCudaTensorsOfOneNameAreAMismatch) {
  runDeviceRanks(stagingSettings(), [](DeviceWorld& world, RuntimeContext& ctx) {
    Request r;
    r.name = "where";
    if (ctx.rank == 0) {
      r.input = r.output = deviceTensor(ctx, DataType::kFloat32, {10}, 1);
    } else {
      r.input = r.output = filledFloats(10, 1);
    }
    try {
      world.runtime->enqueue(r)->wait(std::chrono::seconds(60));
      REQUIRE(false, "host and CUDA tensors were reduced together");
    } catch (const Error& e) {
      REQUIRE(e.code() == ErrorCode::kMismatch, e.what());
      REQUIRE(std::string(e.what()).find("device") != std::string::npos, e.what());
    }
  });
}

// Without a device factory the build's own is used: in a build without CUDA, or on a machine
// without a GPU, a CUDA tensor is refused at enqueue with a message that says why.
TEST(DeviceRuntime, CudaTensorsWithoutAUsableGpuAreRefusedAtEnqueue) {
  RankSpec spec;
  spec.size = 1;
  runRuntimeRanks(spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext&) {
    Request r;
    r.name = "nowhere";
    r.input = r.output = std::make_shared<HostDeviceTensor>(
        DataType::kFloat32, std::vector<int64_t>{4}, Device{Device::Kind::kCuda, 0});
    try {
      rt->enqueue(r);
      // A machine with a GPU: the request was accepted (the GPU check tests it for real).
    } catch (const Error& e) {
      std::string what = e.what();
      REQUIRE(what.find("CUDA") != std::string::npos, what);
    }
  });
}

// A joined rank contributes zeros through the same chunked collectives as a rank that stages
// (one collective over the whole buffer there would pair with the first chunk's here).
TEST(DeviceRuntime, AJoinedRankTakesPartInStagedAllreducesChunkForChunk) {
  for (int64_t fusion : {int64_t{0}, int64_t{64} << 20}) {
    Settings s = stagingSettings();
    s.fusion_threshold_bytes = fusion;
    runDeviceRanks(s, averageBesideAJoinedRank);
  }
}

}  // namespace
}  // namespace ronde::testing
