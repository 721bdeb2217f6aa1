// Host staging of CUDA tensors, on the CPU: the executor's device path, with host memory
// standing in for a device (runtime/device_host_memory.h), asynchronous as a GPU's copies are
// and slowed per copy so that a missing wait reads stale bytes. The chunk pipeline itself is
// tested in device_staging_pipeline_test.cc; the same code runs on a GPU in
// scripts/device_check.sh (tests/gpu/runtime_staging_gpu_test.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "runtime/device_host_memory.h"
#include "runtime/device_staging.h"
#include "runtime/runtime_impl.h"
#include "support/reference.h"
#include "support/slow_device.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

using runtime::HostDeviceTensor;
using runtime::HostMemoryDevice;
using runtime::HostMemoryDeviceOptions;

struct DeviceWorld {
  std::unique_ptr<Runtime> runtime;
  std::mutex mutex;
  std::vector<HostMemoryDevice*> devices;  // made by the runtime's DeviceSet

  std::vector<uintptr_t> waited() {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<uintptr_t> all;
    for (auto* d : devices) {
      auto w = d->waitedStreams();
      all.insert(all.end(), w.begin(), w.end());
    }
    return all;
  }
  std::vector<uintptr_t> finished() {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<uintptr_t> all;
    for (auto* d : devices) {
      auto w = d->finishedStreams();
      all.insert(all.end(), w.begin(), w.end());
    }
    return all;
  }
};

using DeviceBody = std::function<void(DeviceWorld& world, RuntimeContext& ctx)>;

Settings stagingSettings() {
  Settings s = runtimeTestSettings();
  s.gpu_staging_chunk_bytes = 4096;
  return s;
}

// Replaces the harness's runtime by one whose CUDA devices are host memory (`options` on
// `failing_rank` alone when it is >= 0), and runs `body` on it.
void runDeviceRanks(const Settings& settings, const DeviceBody& body,
                    HostMemoryDeviceOptions options = slowCopies(), int failing_rank = -1) {
  RankSpec spec;
  spec.size = 2;
  spec.timeout_seconds = 180;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        rt->shutdown();
        rt.reset();
        DeviceWorld world;
        HostMemoryDeviceOptions mine = options;
        if (failing_rank >= 0 && ctx.rank != failing_rank) mine.fail_at_copy = -1;
        auto factory = [&world, mine](Device device) {
          auto made = std::make_unique<HostMemoryDevice>(device, mine);
          std::lock_guard<std::mutex> lock(world.mutex);
          world.devices.push_back(made.get());
          return made;
        };
        world.runtime = std::make_unique<runtime::RuntimeImpl>(
            settings, ctx.communicator("device", ctx.rank, ctx.size),
            std::vector<std::vector<int>>{}, factory);
        body(world, ctx);
        rt = std::move(world.runtime);  // the harness meets the others and shuts it down
        // `world` (and its device pointers) goes now; the runtime, which owns the devices, later.
      });
}

Device deviceOf(const RuntimeContext& ctx) { return {Device::Kind::kCuda, ctx.rank}; }

std::shared_ptr<HostDeviceTensor> deviceTensor(const RuntimeContext& ctx, DataType type,
                                               std::vector<int64_t> shape, int salt) {
  auto t = std::make_shared<HostDeviceTensor>(type, std::move(shape), deviceOf(ctx));
  for (size_t i = 0; i < t->numel(); ++i)
    storeValue(type, t->data(), i, inputValue(type, ctx.rank, i, salt));
  return t;
}

// What ronde's allreduce gives for (type, op) over `size` ranks with the scales: floats exactly
// (the values are small), integers truncated toward zero after scaling (as copyScaled does).
double expectedAllreduce(DataType type, ReduceOp op, int size, size_t i, int salt, double pre,
                         double post) {
  double v = expectedReduction(type, op, size, i, salt);
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) v *= pre * post;
  if (!isFloat(type) && type != DataType::kBool) v = std::trunc(v);
  return v;
}

bool scalable(DataType type) { return isFloat(type); }

// Every dtype x op, each its own request; all in flight at once, so that with fusion on each
// (dtype, op) pair's tensors fuse and with it off each runs alone.
void allreduceEverything(DeviceWorld& world, RuntimeContext& ctx) {
  struct Case {
    DataType type;
    ReduceOp op;
    double pre, post;
    int salt;
    std::shared_ptr<HostDeviceTensor> tensor;
    std::shared_ptr<Handle> handle;
    uintptr_t stream;
  };
  std::vector<Case> cases;
  int salt = 0;
  for (DataType type : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      if (type == DataType::kBool && op == ReduceOp::kAverage) continue;
      if (type == DataType::kInt16 && op == ReduceOp::kProduct) continue;
      // Two tensors per pair: 2500 elements (several 4 KiB chunks for every dtype) and 7.
      for (int64_t n : {int64_t{2500}, int64_t{7}}) {
        Case c{type, op, 1.0, 1.0, ++salt, nullptr, nullptr, static_cast<uintptr_t>(100 + salt)};
        if (scalable(type) && (op == ReduceOp::kSum || op == ReduceOp::kAverage)) {
          c.pre = 0.5;
          c.post = 3.0;
        }
        c.tensor = deviceTensor(ctx, type, {n}, c.salt);
        cases.push_back(c);
      }
    }
  }
  for (Case& c : cases) {
    Request r;
    r.name = std::string("ar.") + dataTypeName(c.type) + "." + reduceOpName(c.op) + "." +
             std::to_string(c.salt);
    r.input = r.output = c.tensor;
    r.op = c.op;
    r.scaling = {c.pre, c.post};
    r.stream = c.stream;
    c.handle = world.runtime->enqueue(r);
  }
  for (Case& c : cases) {
    c.handle->wait(std::chrono::seconds(60));
    REQUIRE(c.handle->output().get() == c.tensor.get(), "in place");
    for (size_t i = 0; i < c.tensor->numel(); ++i) {
      double want = expectedAllreduce(c.type, c.op, ctx.size, i, c.salt, c.pre, c.post);
      double got = loadValue(c.type, c.tensor->data(), i);
      REQUIRE(got == want, dataTypeName(c.type)
                               << " " << reduceOpName(c.op) << " element " << i << " of "
                               << c.tensor->numel() << ": " << got << ", expected " << want);
    }
  }
  std::vector<uintptr_t> waited = world.waited();
  std::vector<uintptr_t> finished = world.finished();
  for (Case& c : cases) {
    REQUIRE(std::count(waited.begin(), waited.end(), c.stream) == 1,
            "the ready event of stream " << c.stream << " was waited on once");
    REQUIRE(std::count(finished.begin(), finished.end(), c.stream) == 1,
            "stream " << c.stream << " was made to wait for the outputs once");
  }
}

TEST(DeviceRuntime, AllreduceEveryDtypeAndOpOneTensorAtATime) {
  Settings s = stagingSettings();
  s.fusion_threshold_bytes = 0;
  runDeviceRanks(s, allreduceEverything);
}

TEST(DeviceRuntime, AllreduceEveryDtypeAndOpFused) {
  runDeviceRanks(stagingSettings(), [](DeviceWorld& world, RuntimeContext& ctx) {
    allreduceEverything(world, ctx);
    REQUIRE(world.runtime->stats().collectives < world.runtime->stats().responses,
            "some tensors were fused");
  });
}

// Allgather (uneven rows), broadcast, alltoall and reducescatter, one at a time and (allgather,
// broadcast) fused, into separate outputs from the allocator and the runtime's own.
void otherKinds(DeviceWorld& world, RuntimeContext& ctx) {
  const int n = ctx.size;
  const DataType type = DataType::kFloat32;
  std::vector<std::shared_ptr<Handle>> handles;
  std::vector<std::function<void()>> checks;
  // Allgather: rank r gives 700 + r rows of 3.
  for (int k = 0; k < 3; ++k) {
    auto in = deviceTensor(ctx, type, {700 + ctx.rank, 3}, 10 + k);
    Request r;
    r.kind = RequestKind::kAllgather;
    r.name = "ag." + std::to_string(k);
    r.input = in;
    if (k == 1) {
      r.allocate_output = [&ctx, type](const std::vector<int64_t>& shape) {
        return std::make_shared<HostDeviceTensor>(type, shape, deviceOf(ctx));
      };
    }
    r.stream = 7;
    auto h = world.runtime->enqueue(r);
    checks.push_back([h, k, n, type] {
      h->wait(std::chrono::seconds(60));
      auto out = h->output();
      REQUIRE(out->device().kind == Device::Kind::kCuda, "allgather output on the device");
      size_t at = 0;
      for (int src = 0; src < n; ++src) {
        for (size_t i = 0; i < static_cast<size_t>(700 + src) * 3; ++i, ++at) {
          REQUIRE(loadValue(type, out->data(), at) == inputValue(type, src, i, 10 + k),
                  "allgather " << k << " from rank " << src << " element " << i);
        }
      }
      REQUIRE(at == out->numel(), "allgather size");
    });
  }
  // Broadcast from rank 1, in place.
  for (int k = 0; k < 3; ++k) {
    auto t = deviceTensor(ctx, type, {1500 + k}, 20 + k);
    Request r;
    r.kind = RequestKind::kBroadcast;
    r.name = "bc." + std::to_string(k);
    r.input = r.output = t;
    r.root = 1;
    r.stream = 8;
    auto h = world.runtime->enqueue(r);
    checks.push_back([h, t, k, type] {
      h->wait(std::chrono::seconds(60));
      for (size_t i = 0; i < t->numel(); ++i)
        REQUIRE(loadValue(type, t->data(), i) == inputValue(type, 1, i, 20 + k), "broadcast " << k);
    });
  }
  // Alltoall: rank r sends r + j + 1 rows of 2 to rank j.
  {
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int j = 0; j < n; ++j) {
      splits.push_back(ctx.rank + j + 1);
      rows += ctx.rank + j + 1;
    }
    auto in =
        std::make_shared<HostDeviceTensor>(type, std::vector<int64_t>{rows, 2}, deviceOf(ctx));
    int64_t at = 0;
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < ctx.rank + j + 1; ++k, ++at) {
        static_cast<float*>(in->data())[2 * at] = static_cast<float*>(in->data())[2 * at + 1] =
            static_cast<float>(100 * ctx.rank + 10 * j + k);
      }
    }
    Request r;
    r.kind = RequestKind::kAlltoall;
    r.name = "a2a";
    r.input = in;
    r.splits = splits;
    auto h = world.runtime->enqueue(r);
    int me = ctx.rank;
    checks.push_back([h, n, me] {
      h->wait(std::chrono::seconds(60));
      const float* out = static_cast<const float*>(h->output()->data());
      REQUIRE(h->output()->device().kind == Device::Kind::kCuda, "alltoall output on the device");
      int64_t at = 0;
      for (int src = 0; src < n; ++src) {
        REQUIRE(h->result()[static_cast<size_t>(src)] == src + me + 1, "rows from " << src);
        for (int k = 0; k < src + me + 1; ++k, ++at)
          REQUIRE(out[2 * at] == 100 * src + 10 * me + k, "alltoall from " << src << " row " << k);
      }
    });
  }
  // Reducescatter (sum, prescale 2) of 1001 rows of 4: rank 0 gets 501 rows, rank 1 500.
  {
    auto in = deviceTensor(ctx, type, {1001, 4}, 30);
    Request r;
    r.kind = RequestKind::kReducescatter;
    r.name = "rs";
    r.input = in;
    r.scaling = {2.0, 1.0};
    auto h = world.runtime->enqueue(r);
    int me = ctx.rank;
    checks.push_back([h, n, me, type] {
      h->wait(std::chrono::seconds(60));
      auto out = h->output();
      size_t first_row = me == 0 ? 0 : 501;
      REQUIRE(out->numel() == (me == 0 ? 501u : 500u) * 4, "reducescatter block size");
      for (size_t i = 0; i < out->numel(); ++i) {
        double want = 2 * expectedReduction(type, ReduceOp::kSum, n, first_row * 4 + i, 30);
        REQUIRE(loadValue(type, out->data(), i) == want, "reducescatter element " << i);
      }
    });
  }
  for (auto& check : checks) check();
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
  HostMemoryDeviceOptions options = slowCopies();
  options.fail_at_copy = 3;
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
      options, 1);
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
    runDeviceRanks(s, [](DeviceWorld& world, RuntimeContext& ctx) {
      Request join;
      join.kind = RequestKind::kJoin;
      if (ctx.rank == 1) {
        world.runtime->enqueue(join)->wait(std::chrono::seconds(60));
        return;
      }
      std::vector<std::shared_ptr<HostDeviceTensor>> tensors;
      std::vector<std::shared_ptr<Handle>> handles;
      for (int k = 0; k < 3; ++k) {
        tensors.push_back(deviceTensor(ctx, DataType::kFloat32, {5000 + k}, k));
        Request r;
        r.name = "alone." + std::to_string(k);
        r.input = r.output = tensors.back();
        r.op = ReduceOp::kAverage;
        r.scaling = {2.0, 1.0};
        handles.push_back(world.runtime->enqueue(r));
      }
      for (int k = 0; k < 3; ++k) {
        handles[static_cast<size_t>(k)]->wait(std::chrono::seconds(60));
        for (size_t i = 0; i < tensors[static_cast<size_t>(k)]->numel(); ++i) {
          double want = 2 * inputValue(DataType::kFloat32, 0, i, k) / 2;  // (2 x + 0) / 2
          REQUIRE(loadValue(DataType::kFloat32, tensors[static_cast<size_t>(k)]->data(), i) == want,
                  "tensor " << k << " element " << i);
        }
      }
      world.runtime->enqueue(join)->wait(std::chrono::seconds(60));
    });
  }
}

// The runtime does not drive the NCCL backend yet: asking for it is refused, not ignored.
TEST(DeviceRuntime, NcclGpuOperationsAreRefusedAtInit) {
  RankSpec spec;
  spec.size = 1;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        rt->shutdown();
        Settings s = runtimeTestSettings();
        s.gpu_operations = GpuOperations::kNccl;
        try {
          rt = Runtime::init(s, ctx.communicator("nccl", 0, 1));
          REQUIRE(false, "RONDE_GPU_OPERATIONS=nccl was accepted");
        } catch (const Error& e) {
          REQUIRE(e.code() == ErrorCode::kConfig, e.what());
          REQUIRE(std::string(e.what()).find("RONDE_GPU_OPERATIONS=nccl") != std::string::npos,
                  e.what());
        }
        rt.reset();
      });
}

}  // namespace
}  // namespace ronde::testing
