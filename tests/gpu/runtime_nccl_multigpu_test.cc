// The runtime on NCCL with a GPU per rank (forked processes, rank r on GPU r): every
// collective x dtype x op, single and fused, under RONDE_GPU_OPERATIONS=nccl and auto; the
// hierarchical allreduce across two hosts; Adasum; a joined rank; process sets, each with NCCL
// communicators of its own; host and CUDA tensors in one cycle; a rank whose tensor is on the
// other kind of device; a rank that dies, then its survivors carrying on in a new world; and
// init after shutdown again and again, on NCCL and host-staged, leaving no device memory,
// stream or thread behind.
//
// A machine needs 3 GPUs (4 for the hierarchical and Adasum tests); with fewer they skip. CI
// runs them on CUDA and NCCL emulated on the host (tests/emulated_gpu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime_gpu_harness.h"
#include "support/process_census.h"
#include "support/reference.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

const GpuRanks kThreeGpus{3, true, {}};

bool contains(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

// A host tensor holding inputValue(type, rank, i, salt).
std::shared_ptr<HostTensor> hostInput(DataType type, std::vector<int64_t> shape, int rank,
                                      int salt) {
  auto t = std::make_shared<HostTensor>(type, std::move(shape));
  for (size_t i = 0; i < t->numel(); ++i)
    storeValue(type, t->data(), i, inputValue(type, rank, i, salt));
  return t;
}

Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t, const GatedStream& s,
                    int process_set = 0) {
  Request r;
  r.name = name;
  r.input = r.output = std::move(t);
  r.op = ReduceOp::kSum;
  r.process_set = process_set;
  r.stream = s.id();
  return r;
}

TEST(RuntimeNcclMultiGpu, AllreduceEveryDtypeAndOpOneTensorAtATime) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  runGpuRanks(ncclSettings(0), allreduceEverything, kThreeGpus);
}

TEST(RuntimeNcclMultiGpu, AllreduceEveryDtypeAndOpFused) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  runGpuRanks(ncclSettings(64 << 20), allreduceEverything, kThreeGpus);
}

TEST(RuntimeNcclMultiGpu, OtherCollectivesOneAtATime) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  runGpuRanks(ncclSettings(0), otherKinds, kThreeGpus);
}

TEST(RuntimeNcclMultiGpu, OtherCollectivesFused) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  runGpuRanks(ncclSettings(64 << 20), otherKinds, kThreeGpus);
}

// RONDE_GPU_OPERATIONS=auto where every rank has a GPU of its own: NCCL.
TEST(RuntimeNcclMultiGpu, AutoWithAGpuPerRank) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  Settings s = stagingSettings(64 << 20);
  s.gpu_operations = GpuOperations::kAuto;
  runGpuRanks(s, allreduceEverything, kThreeGpus);
  runGpuRanks(s, otherKinds, kThreeGpus);
}

// A rank that dies after the device communicators formed: the others' CUDA requests fail
// naming it, their NCCL communicators are aborted rather than left waiting, and the runtimes
// stop and shut down.
TEST(RuntimeNcclMultiGpu, ADeadRankFailsPendingHandlesEverywhere) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  Settings settings = ncclSettings(64 << 20);
  runGpuRanks(settings, [](Runtime& rt, int rank, int, int gpu) {
    ::freopen("/dev/null", "w", stderr);
    GatedStream s(gpu);
    auto t = s.input(DataType::kFloat32, {1000}, rank, 1);
    Request warm;
    warm.name = "warm";
    warm.input = warm.output = t;
    warm.stream = s.id();
    rt.enqueue(warm)->wait(std::chrono::seconds(60));
    if (rank == 2) ::_exit(0);  // gone without a word, its NCCL communicator formed
    for (const std::string& name : {std::string("warm"), "only-mine-" + std::to_string(rank)}) {
      Request r = warm;
      r.name = name;
      bool failed = false;
      try {
        rt.enqueue(r)->wait(std::chrono::seconds(40));
      } catch (const Error& e) {
        failed = (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kAborted) &&
                 std::string(e.what()).find("rank 2") != std::string::npos;
        if (!failed) throw;
      }
      REQUIRE(failed, "the pending CUDA request " << name << " fails naming rank 2");
    }
    REQUIRE(!rt.isInitialized(), "the runtime is stopped");
    rt.shutdown();
  }, kThreeGpus);
}

// Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE: 2 hosts of 2 ranks, NCCL inside each host, the
// shares across hosts through host memory.
TEST(RuntimeNcclMultiGpu, HierarchicalAllreduceAcrossTwoHosts) {
  SKIP_WITH_FEWER_GPUS_THAN(4);
  for (int64_t fusion : {int64_t{0}, int64_t{64} << 20}) {
    Settings s = ncclSettings(fusion);
    s.gpu_hierarchical_allreduce = true;
    s.gpu_staging_chunk_bytes = 4096;  // the shares cross hosts in several chunks
    runGpuRanks(s, allreduceEverything, GpuRanks{4, true, {"a", "a", "b", "b"}});
  }
}

// Adasum under RONDE_GPU_OPERATIONS=nccl: NCCL has no such reduction, so the runtime stages the
// tensors through the host and runs its own; across two hosts it sums within each first.
TEST(RuntimeNcclMultiGpu, AdasumMatchesItsDefinitionOnOneHostAndOnTwo) {
  SKIP_WITH_FEWER_GPUS_THAN(4);
  runGpuRanks(ncclSettings(64 << 20), [](Runtime& rt, int rank, int size, int gpu) {
    adasumOfCudaTensors(rt, rank, size, gpu, 1);
  }, GpuRanks{4, true, {}});
  runGpuRanks(ncclSettings(64 << 20), [](Runtime& rt, int rank, int size, int gpu) {
    adasumOfCudaTensors(rt, rank, size, gpu, 2);
  }, GpuRanks{4, true, {"a", "a", "b", "b"}});
}

// Process sets {0, 2} and {1, 2} beside the world, reducing and gathering in the same cycles:
// each set forms NCCL communicators of its own (rank 2 holds three), and a result taken over the
// wrong ranks differs. Then {0, 2} goes and {0, 1} comes, on the same GPUs.
TEST(RuntimeNcclMultiGpu, ProcessSetsReduceAndGatherOverTheirOwnMembers) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  runGpuRanks(ncclSettings(64 << 20), [](Runtime& rt, int rank, int size, int gpu) {
    GatedStream s(gpu);
    // One round: every set this rank is in reduces two tensors of two dtypes and gathers one.
    auto round = [&](const std::vector<std::pair<int, std::vector<int>>>& sets) {
      s.hold();
      std::vector<std::function<void()>> checks;
      for (const auto& [id, members] : sets) {
        if (!contains(members, rank)) continue;
        const std::string set = "set " + std::to_string(id);
        for (DataType type : {DataType::kFloat32, DataType::kInt64}) {
          for (int k = 0; k < 2; ++k) {
            const int salt = id * 10 + (type == DataType::kInt64 ? 4 : 0) + k;
            auto t = s.input(type, {4000 + k}, rank, salt);
            auto h = rt.enqueue(allreduceOf("ps.ar." + std::to_string(salt), t, s, id));
            checks.push_back([&s, h, t, members, type, salt, set] {
              h->wait(std::chrono::seconds(120));
              std::vector<unsigned char> got = s.read(*t);
              for (size_t i = 0; i < t->numel(); ++i) {
                double want = 0;
                for (int m : members) want += inputValue(type, m, i, salt);
                REQUIRE(loadValue(type, got.data(), i) == want,
                        set << " allreduce " << dataTypeName(type) << " element " << i << ": "
                            << loadValue(type, got.data(), i) << ", expected " << want);
              }
            });
          }
        }
        const int salt = id * 10 + 9;
        Request g;
        g.kind = RequestKind::kAllgather;
        g.name = "ps.ag." + std::to_string(id);
        g.input = s.input(DataType::kFloat32, {100 + rank, 2}, rank, salt);
        g.process_set = id;
        g.stream = s.id();
        auto h = rt.enqueue(g);
        checks.push_back([&s, h, members, salt, set] {
          h->wait(std::chrono::seconds(120));
          size_t expected = 0;
          for (int m : members) expected += static_cast<size_t>(100 + m) * 2;
          REQUIRE(h->output()->numel() == expected, set << " allgather of "
                                                        << h->output()->numel()
                                                        << " elements, expected " << expected);
          std::vector<unsigned char> got = s.read(*h->output());
          size_t at = 0;
          for (int m : members) {  // in the set's rank order: its members, sorted
            for (size_t i = 0; i < static_cast<size_t>(100 + m) * 2; ++i, ++at)
              REQUIRE(loadValue(DataType::kFloat32, got.data(), at) ==
                          inputValue(DataType::kFloat32, m, i, salt),
                      set << " allgather block of rank " << m << " element " << i);
          }
        });
      }
      s.release();
      for (auto& c : checks) c();
    };
    std::vector<int> everyone;
    for (int r = 0; r < size; ++r) everyone.push_back(r);
    const int a = rt.addProcessSet({0, 2});
    const int b = rt.addProcessSet({1, 2});
    round({{0, everyone}, {a, {0, 2}}, {b, {1, 2}}});
    rt.removeProcessSet(a);
    const int c = rt.addProcessSet({0, 1});
    round({{0, everyone}, {b, {1, 2}}, {c, {0, 1}}});
  }, kThreeGpus);
}

// Host and CUDA tensors in the same cycles, alone and in one group: each kind is reduced where
// it lives (host tensors by the host backend, CUDA ones on NCCL), and none is fused with the
// other kind.
TEST(RuntimeNcclMultiGpu, HostAndCudaTensorsInTheSameCycles) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  runGpuRanks(ncclSettings(64 << 20), [](Runtime& rt, int rank, int size, int gpu) {
    GatedStream s(gpu);
    s.hold();
    std::vector<std::shared_ptr<Tensor>> tensors;
    std::vector<Request> alone, group;
    for (int k = 0; k < 8; ++k) {
      const std::vector<int64_t> shape{3000 + k};
      std::shared_ptr<Tensor> t;
      if (k % 2 == 0) {
        t = s.input(DataType::kFloat32, shape, rank, k);
      } else {
        t = hostInput(DataType::kFloat32, shape, rank, k);
      }
      tensors.push_back(t);
      (k < 4 ? alone : group).push_back(allreduceOf("mixed." + std::to_string(k), t, s));
    }
    std::vector<std::shared_ptr<Handle>> handles;
    for (Request& r : alone) handles.push_back(rt.enqueue(r));
    for (auto& h : rt.enqueueGroup(group)) handles.push_back(h);
    s.release();
    for (size_t k = 0; k < tensors.size(); ++k) {
      handles[k]->wait(std::chrono::seconds(120));
      Tensor& t = *tensors[k];
      std::vector<unsigned char> got;
      if (t.device().kind == Device::Kind::kCuda) {
        got = s.read(t);
      } else {
        got.assign(static_cast<unsigned char*>(t.data()),
                   static_cast<unsigned char*>(t.data()) + t.bytes());
      }
      for (size_t i = 0; i < t.numel(); ++i)
        REQUIRE(loadValue(DataType::kFloat32, got.data(), i) ==
                    expectedReduction(DataType::kFloat32, ReduceOp::kSum, size, i,
                                      static_cast<int>(k)),
                "tensor " << k << " (" << (k % 2 == 0 ? "cuda" : "host") << ") element " << i);
    }
  }, kThreeGpus);
}

// A rank that joined has no tensor to say which GPU it is on: it takes part in the NCCL
// collectives of the others with zeros, on its local rank's GPU (it never used one here).
TEST(RuntimeNcclMultiGpu, AJoinedRankTakesPartWithZerosOnItsLocalGpu) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  for (int64_t fusion : {int64_t{0}, int64_t{64} << 20}) {
    runGpuRanks(ncclSettings(fusion), [](Runtime& rt, int rank, int size, int gpu) {
      Request join;
      join.kind = RequestKind::kJoin;
      join.name = "join";
      if (rank == 1) {
        rt.enqueue(join)->wait(std::chrono::seconds(120));
        return;
      }
      GatedStream s(gpu);
      s.hold();
      std::vector<std::shared_ptr<CudaTensor>> tensors;
      std::vector<std::shared_ptr<Handle>> handles;
      for (int k = 0; k < 4; ++k) {
        tensors.push_back(s.input(DataType::kFloat32, {5000 + k}, rank, k));
        Request r = allreduceOf("beside.a.joined." + std::to_string(k), tensors.back(), s);
        r.op = k % 2 == 0 ? ReduceOp::kSum : ReduceOp::kAverage;
        handles.push_back(rt.enqueue(r));
      }
      s.release();
      for (size_t k = 0; k < tensors.size(); ++k) {
        handles[k]->wait(std::chrono::seconds(120));
        std::vector<unsigned char> got = s.read(*tensors[k]);
        for (size_t i = 0; i < tensors[k]->numel(); ++i) {
          const int salt = static_cast<int>(k);
          double want = inputValue(DataType::kFloat32, 0, i, salt) +
                        inputValue(DataType::kFloat32, 2, i, salt);  // rank 1 adds zeros
          if (k % 2 == 1) want /= size;  // over every rank, the joined one too
          REQUIRE(std::fabs(loadValue(DataType::kFloat32, got.data(), i) - want) <= 1e-6,
                  "tensor " << k << " element " << i << ": "
                            << loadValue(DataType::kFloat32, got.data(), i) << ", expected "
                            << want);
        }
      }
      rt.enqueue(join)->wait(std::chrono::seconds(120));
    }, kThreeGpus);
  }
}

// One rank hands a host tensor where the others hand CUDA tensors: an error naming that rank
// and the devices on every rank, not a hang or a reduction of mismatched buffers; the job goes on.
TEST(RuntimeNcclMultiGpu, AHostTensorWhereTheOthersHaveCudaOnesIsAMismatchNamingTheRank) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  runGpuRanks(ncclSettings(0), [](Runtime& rt, int rank, int size, int gpu) {
    GatedStream s(gpu);
    std::shared_ptr<Tensor> odd;
    if (rank == 1) {
      odd = hostInput(DataType::kFloat32, {100}, rank, 1);
    } else {
      odd = s.input(DataType::kFloat32, {100}, rank, 1);
    }
    std::string error;
    try {
      rt.enqueue(allreduceOf("where", odd, s))->wait(std::chrono::seconds(60));
    } catch (const Error& e) {
      REQUIRE(e.code() == ErrorCode::kMismatch, "expected a mismatch, got: " << e.what());
      error = e.what();
    }
    REQUIRE(error.find("device mismatch") != std::string::npos &&
                error.find("rank 1 has cpu") != std::string::npos &&
                error.find("ranks 0, 2 have cuda") != std::string::npos,
            "the error names the devices of each rank: '" << error << "'");
    auto t = s.input(DataType::kFloat32, {100}, rank, 2);
    rt.enqueue(allreduceOf("after", t, s))->wait(std::chrono::seconds(60));
    std::vector<unsigned char> got = s.read(*t);
    for (size_t i = 0; i < t->numel(); ++i)
      REQUIRE(loadValue(DataType::kFloat32, got.data(), i) ==
                  expectedReduction(DataType::kFloat32, ReduceOp::kSum, size, i, 2),
              "the allreduce after the mismatch, element " << i);
  }, kThreeGpus);
}

// What an elastic job does when a worker dies: the survivors' requests fail naming it, they
// shut down and form a new world of two, whose NCCL communicators (new ones, on the same GPUs)
// reduce correctly.
TEST(RuntimeNcclMultiGpu, SurvivorsOfADeadRankCarryOnInANewWorld) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  const Settings settings = ncclSettings(64 << 20);
  RankSpec spec;
  spec.size = 3;
  spec.timeout_seconds = 240;
  runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    ::freopen("/dev/null", "w", stderr);
    const int gpu = ctx.rank;
    {
      GatedStream s(gpu);
      auto t = s.input(DataType::kFloat32, {1000}, ctx.rank, 1);
      rt->enqueue(allreduceOf("warm", t, s))->wait(std::chrono::seconds(60));
      if (ctx.rank == 2) ::_exit(0);  // gone without a word, its NCCL communicators formed
      bool failed = false;
      try {
        rt->enqueue(allreduceOf("warm", t, s))->wait(std::chrono::seconds(40));
      } catch (const Error& e) {
        failed = std::string(e.what()).find("rank 2") != std::string::npos;
      }
      REQUIRE(failed, "the old world's request fails naming rank 2");
    }
    rt->shutdown();
    rt = Runtime::init(settings, ctx.communicator("survivors", ctx.rank, 2));
    allreduceEverything(*rt, ctx.rank, 2, gpu);
    otherKinds(*rt, ctx.rank, 2, gpu);
  });
}

size_t freeDeviceMemory(int gpu) {
  size_t free = 0, total = 0;
  check(cudaSetDevice(gpu), "cudaSetDevice");
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

// Init, CUDA collectives, shutdown, again and again in the same processes (as an elastic job's
// resets do), on NCCL and host-staged: each generation forms its own device communicators and
// staging buffers and frees what it made. Measured after the first, when CUDA and the streams
// it keeps are up: device memory (cudaMemGetInfo) and threads (a stream's or a communicator's)
// must come back to the same.
void generationAfterGeneration(const Settings& settings) {
  RankSpec spec;
  spec.size = 3;
  spec.timeout_seconds = 240;
  runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    const int gpu = ctx.rank;
    size_t free_after_first = 0, threads_after_first = 0;
    for (int generation = 0; generation < 4; ++generation) {
      if (!rt) rt = Runtime::init(settings, ctx.communicator("gen" + std::to_string(generation),
                                                             ctx.rank, ctx.size));
      {
        GatedStream s(gpu);
        s.hold();
        std::vector<std::shared_ptr<CudaTensor>> tensors;
        std::vector<std::shared_ptr<Handle>> handles;
        for (int k = 0; k < 3; ++k) {
          const int salt = generation * 10 + k;  // a value left from another generation fails
          tensors.push_back(s.input(DataType::kFloat32, {70000 + k}, ctx.rank, salt));
          handles.push_back(rt->enqueue(allreduceOf("g." + std::to_string(k), tensors.back(), s)));
        }
        s.release();
        for (int k = 0; k < 3; ++k) {
          handles[k]->wait(std::chrono::seconds(120));
          std::vector<unsigned char> got = s.read(*tensors[k]);
          for (size_t i = 0; i < tensors[k]->numel(); ++i)
            REQUIRE(loadValue(DataType::kFloat32, got.data(), i) ==
                        expectedReduction(DataType::kFloat32, ReduceOp::kSum, ctx.size, i,
                                          generation * 10 + k),
                    "generation " << generation << " tensor " << k << " element " << i);
        }
      }
      rt->shutdown();
      rt.reset();
      const size_t free = freeDeviceMemory(gpu);
      if (generation == 0) {
        free_after_first = free;
        threads_after_first = settledThreadCount(0);
        continue;
      }
      REQUIRE(free == free_after_first, "generation " << generation << ": "
                                                      << (free_after_first - free)
                                                      << " bytes of GPU " << gpu
                                                      << " still allocated after shutdown");
      const size_t threads = settledThreadCount(threads_after_first);
      REQUIRE(threads == threads_after_first,
              "generation " << generation << ": " << threads << " threads after shutdown, "
                            << threads_after_first << " after the first");
    }
  });
}

TEST(RuntimeNcclMultiGpu, GenerationAfterGenerationLeavesNoDeviceMemoryOrThreadBehind) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  generationAfterGeneration(ncclSettings(64 << 20));
}

TEST(RuntimeStagingMultiGpu, GenerationAfterGenerationLeavesNoDeviceMemoryOrThreadBehind) {
  SKIP_WITH_FEWER_GPUS_THAN(3);
  generationAfterGeneration(stagingSettings(64 << 20));
}

}  // namespace
}  // namespace ronde::testing
