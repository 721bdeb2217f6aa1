// CUDA tensors through the runtime on a real GPU, every collective x dtype x op against
// host-computed values: 2 ranks (forked processes) sharing the one GPU through host staging
// (RONDE_GPU_OPERATIONS=host, and auto, which must find that they share it), and one rank on
// the NCCL backend (RONDE_GPU_OPERATIONS=nccl: NCCL refuses two ranks on one GPU, so a world of
// one is all one GPU can show; with two ranks on it, nccl must be an error naming them).
// Each rank produces its inputs on a stream of its own behind a gate, a host callback that
// holds the stream until the rank has enqueued every request, so a runtime that read them
// without waiting on the request's ready event would read the zeros that were there before;
// outputs are read back on that same stream right after the handle completes, with no device
// synchronisation in between (runtime_gpu_harness.h).
//
// runtime_nccl_multigpu_test.cc has the runtime on NCCL with a GPU per rank.
//
// DISABLED_StagingBench.* (run by scripts/device_check.sh with --gtest_also_run_disabled_tests)
// prints the 64 MiB staged allreduce beside a host allreduce plus its two copies.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "runtime_gpu_harness.h"
#include "support/reference.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

const GpuRanks kOneRank{1, false, {}};

TEST(RuntimeStagingGpu, AllreduceEveryDtypeAndOpOneTensorAtATime) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(stagingSettings(0), allreduceEverything);
}

TEST(RuntimeStagingGpu, AllreduceEveryDtypeAndOpFused) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(stagingSettings(64 << 20), allreduceEverything);
}

TEST(RuntimeStagingGpu, OtherCollectivesOneAtATime) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(stagingSettings(0), otherKinds);
}

TEST(RuntimeStagingGpu, OtherCollectivesFused) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(stagingSettings(64 << 20), otherKinds);
}

TEST(RuntimeStagingGpu, NewOutputsAreDeviceMemory) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(stagingSettings(0), [](Runtime& rt, int rank, int size, int gpu) {
    GatedStream s(gpu);
    s.hold();
    auto in = s.input(DataType::kFloat32, {1000}, rank, 1);
    Request r;
    r.kind = RequestKind::kAllgather;
    r.name = "own";
    r.input = in;  // no output, no allocator: the runtime's CUDA tensor
    r.stream = s.id();
    auto h = rt.enqueue(r);
    s.release();
    h->wait(std::chrono::seconds(60));
    cudaPointerAttributes attributes{};
    check(cudaPointerGetAttributes(&attributes, h->output()->data()), "cudaPointerGetAttributes");
    REQUIRE(attributes.type == cudaMemoryTypeDevice, "the new output is device memory");
    std::vector<unsigned char> got = s.read(*h->output());
    for (size_t i = 0; i < 1000; ++i)
      REQUIRE(loadValue(DataType::kFloat32, got.data(), 1000 + i) ==
                  inputValue(DataType::kFloat32, 1, i, 1),
              "element " << i);
    (void)size;
  });
}

// Adasum is the runtime's own algorithm on the host: CUDA tensors reach it staged, fused ones
// keeping their own coefficients.
TEST(RuntimeStagingGpu, AdasumMatchesItsDefinition) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(stagingSettings(64 << 20), [](Runtime& rt, int rank, int size, int gpu) {
    adasumOfCudaTensors(rt, rank, size, gpu, 1);
  });
}

// RONDE_GPU_OPERATIONS=auto, two ranks on one GPU: the runtime finds (by PCI bus id) that they
// share it, and stages instead of forming an NCCL communicator NCCL would refuse.
TEST(RuntimeStagingGpu, AutoStagesRanksSharingTheGpu) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  Settings s = stagingSettings(64 << 20);
  s.gpu_operations = GpuOperations::kAuto;
  runGpuRanks(s, allreduceEverything);
}

TEST(RuntimeNcclGpu, AllreduceEveryDtypeAndOpOneTensorAtATime) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(ncclSettings(0), allreduceEverything, kOneRank);
}

TEST(RuntimeNcclGpu, AllreduceEveryDtypeAndOpFused) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(ncclSettings(64 << 20), allreduceEverything, kOneRank);
}

TEST(RuntimeNcclGpu, OtherCollectivesOneAtATime) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(ncclSettings(0), otherKinds, kOneRank);
}

TEST(RuntimeNcclGpu, OtherCollectivesFused) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(ncclSettings(64 << 20), otherKinds, kOneRank);
}

TEST(RuntimeNcclGpu, TwoRanksOnOneGpuAreAnErrorNamingThem) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(ncclSettings(0), [](Runtime& rt, int rank, int, int gpu) {
    GatedStream s(gpu);
    Request r;
    r.name = "shared";
    r.input = r.output = s.input(DataType::kFloat32, {100}, rank, 1);
    r.stream = s.id();
    try {
      rt.enqueue(r)->wait(std::chrono::seconds(120));
      REQUIRE(false, "two ranks on one GPU were accepted under RONDE_GPU_OPERATIONS=nccl");
    } catch (const Error& e) {
      REQUIRE(std::string(e.what()).find("share one GPU") != std::string::npos, e.what());
    }
    rt.shutdown();
  });
}

// 64 MiB of float32: the staged allreduce of a CUDA tensor against the host allreduce of the
// same bytes plus the pinned device-to-host and host-to-device copies it stands for.
TEST(DISABLED_StagingBench, Allreduce64MiB) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  runGpuRanks(stagingSettings(64 << 20), [](Runtime& rt, int rank, int size, int) {
    const int64_t n = 16 << 20;
    const int iterations = 10;
    cudaStream_t stream;
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    auto device = std::make_shared<CudaTensor>(DataType::kFloat32, std::vector<int64_t>{n});
    check(cudaMemset(device->data(), 0, device->bytes()), "cudaMemset");
    auto host = std::make_shared<HostTensor>(DataType::kFloat32, std::vector<int64_t>{n});
    void* pinned = nullptr;
    check(cudaHostAlloc(&pinned, device->bytes(), cudaHostAllocDefault), "cudaHostAlloc");
    auto seconds = [](auto start) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    auto run = [&](const std::string& name, std::shared_ptr<Tensor> t) {
      Request r;
      r.name = name;
      r.input = r.output = t;
      r.stream = reinterpret_cast<uintptr_t>(stream);
      rt.enqueue(r)->wait(std::chrono::seconds(120));
    };
    for (int w = 0; w < 2; ++w) {
      run("warm.d", device);
      run("warm.h", host);
    }
    double staged = 1e9, plain = 1e9, copies = 1e9;
    for (int it = 0; it < iterations; ++it) {
      auto t0 = std::chrono::steady_clock::now();
      run("d", device);
      check(cudaStreamSynchronize(stream), "sync");
      staged = std::min(staged, seconds(t0));
      auto t1 = std::chrono::steady_clock::now();
      run("h", host);
      plain = std::min(plain, seconds(t1));
      auto t2 = std::chrono::steady_clock::now();
      check(
          cudaMemcpyAsync(pinned, device->data(), device->bytes(), cudaMemcpyDeviceToHost, stream),
          "d2h");
      check(
          cudaMemcpyAsync(device->data(), pinned, device->bytes(), cudaMemcpyHostToDevice, stream),
          "h2d");
      check(cudaStreamSynchronize(stream), "sync");
      copies = std::min(copies, seconds(t2));
    }
    if (rank == 0) {
      const double bytes = static_cast<double>(device->bytes());
      std::printf(
          "{\"bench\": \"staged_allreduce_64MiB\", \"ranks\": %d, \"staged_ms\": %.3f, "
          "\"host_allreduce_ms\": %.3f, \"two_pinned_copies_ms\": %.3f, "
          "\"host_plus_copies_ms\": %.3f, \"pinned_copy_GBps\": %.1f, \"target_met\": %s}\n",
          size, staged * 1e3, plain * 1e3, copies * 1e3, (plain + copies) * 1e3,
          2 * bytes / copies / 1e9, staged <= plain + copies ? "true" : "false");
      std::fflush(stdout);
    }
    cudaFreeHost(pinned);
    cudaStreamDestroy(stream);
  });
}

}  // namespace
}  // namespace ronde::testing
