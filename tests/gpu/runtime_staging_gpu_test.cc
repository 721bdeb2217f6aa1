// CUDA tensors through the runtime on a real GPU, every collective x dtype x op against
// host-computed values: 2 ranks (forked processes) sharing the one GPU through host staging
// (RONDE_GPU_OPERATIONS=host, and auto, which must find that they share it), and one rank on
// the NCCL backend (RONDE_GPU_OPERATIONS=nccl: NCCL refuses two ranks on one GPU, so a world of
// one is all one GPU can show; with two ranks on it, nccl must be an error naming them).
// Each rank produces its inputs on a stream of its own behind a gate, a host callback that
// holds the stream until the rank has enqueued every request, so a runtime that read them
// without waiting on the request's ready event would read the zeros that were there before;
// outputs are read back on that same stream right after the handle completes, with no device
// synchronisation in between.
//
// RuntimeNcclMultiGpu.* run 3 ranks on NCCL, one GPU each (they skip with fewer GPUs; CI runs
// them on CUDA and NCCL emulated on the host: tests/emulated_gpu).
//
// DISABLED_StagingBench.* (run by scripts/device_check.sh with --gtest_also_run_disabled_tests)
// prints the 64 MiB staged allreduce beside a host allreduce plus its two copies.
//
// CUDA is initialised in the children only: a parent that touched CUDA before fork() leaves its
// children unable to use it, so even the skip probe runs in a child process.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "gpu_available.h"
#include "support/reference.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

// noGpuReason(), asked in a child so that this process never initialises CUDA.
std::string noGpuReasonFromAChild() {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string reason = noGpuReason();
    ssize_t ignored = write(fds[1], reason.data(), reason.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string reason;
  char buffer[256];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) reason.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return reason;
}

#define SKIP_WITHOUT_GPU_IN_A_CHILD()                          \
  do {                                                         \
    const std::string ronde_no_gpu_ = noGpuReasonFromAChild(); \
    if (!ronde_no_gpu_.empty()) GTEST_SKIP() << ronde_no_gpu_; \
  } while (0)

void check(cudaError_t status, const char* what) {
  REQUIRE(status == cudaSuccess, what << ": " << cudaGetErrorString(status));
}

class CudaTensor final : public Tensor {
 public:
  CudaTensor(DataType type, std::vector<int64_t> shape, int gpu = 0)
      : type_(type), shape_(std::move(shape)), gpu_(gpu) {
    check(cudaSetDevice(gpu), "cudaSetDevice");
    check(cudaMalloc(&data_, std::max<size_t>(numel() * sizeOf(type), 1)), "cudaMalloc");
  }
  ~CudaTensor() override { cudaFree(data_); }
  DataType dtype() const override { return type_; }
  std::vector<int64_t> shape() const override { return shape_; }
  Device device() const override { return {Device::Kind::kCuda, gpu_}; }
  void* data() override { return data_; }

 private:
  DataType type_;
  std::vector<int64_t> shape_;
  int gpu_;
  void* data_ = nullptr;
};

// A stream of the rank's GPU whose work can be held behind a gate, and helpers that write and
// read tensors on it.
struct GatedStream {
  cudaStream_t stream = nullptr;
  int gpu;
  std::atomic<bool> open{true};
  std::vector<std::vector<unsigned char>> staged;  // host sources, alive until synchronised

  explicit GatedStream(int gpu) : gpu(gpu) {
    check(cudaSetDevice(gpu), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~GatedStream() {
    open = true;
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  uintptr_t id() const { return reinterpret_cast<uintptr_t>(stream); }

  // Work queued from now on waits until release() (or 60 s: a test that forgot does not hang).
  void hold() {
    open = false;
    check(cudaLaunchHostFunc(stream, waitForTheGate, this), "cudaLaunchHostFunc");
  }
  // Opens the gate 100 ms from now: long after a runtime that did not wait for the inputs
  // (the requests' ready events) would have read them.
  void release() {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    open = true;
  }
  static void waitForTheGate(void* self) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!static_cast<GatedStream*>(self)->open && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // A device tensor holding inputValue(type, rank, i, salt), written on the stream.
  std::shared_ptr<CudaTensor> input(DataType type, std::vector<int64_t> shape, int rank, int salt) {
    auto t = std::make_shared<CudaTensor>(type, std::move(shape), gpu);
    check(cudaMemset(t->data(), 0, std::max<size_t>(t->bytes(), 1)), "cudaMemset");
    std::vector<unsigned char>& host = staged.emplace_back(std::max<size_t>(t->bytes(), 1));
    for (size_t i = 0; i < t->numel(); ++i)
      storeValue(type, host.data(), i, inputValue(type, rank, i, salt));
    check(cudaMemcpyAsync(t->data(), host.data(), t->bytes(), cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync");
    return t;
  }
  // The tensor's bytes, read on the stream (ordered after the runtime's copies, if it kept its
  // promise).
  std::vector<unsigned char> read(Tensor& t) {
    std::vector<unsigned char> host(std::max<size_t>(t.bytes(), 1));
    check(cudaMemcpyAsync(host.data(), t.data(), t.bytes(), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return host;
  }
};

Settings stagingSettings(int64_t fusion_threshold) {
  Settings s = runtimeTestSettings();
  s.gpu_operations = GpuOperations::kHost;
  s.gpu_staging_chunk_bytes = 64 * 1024;
  s.fusion_threshold_bytes = fusion_threshold;
  return s;
}

void allreduceEverything(Runtime& rt, int rank, int size, int gpu) {
  GatedStream s(gpu);
  s.hold();
  struct Case {
    DataType type;
    ReduceOp op;
    double pre = 1, post = 1;
    int salt;
    std::shared_ptr<CudaTensor> tensor;
    std::shared_ptr<Handle> handle;
  };
  std::vector<Case> cases;
  int salt = 0;
  for (DataType type : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      if (type == DataType::kBool && op == ReduceOp::kAverage) continue;
      if (type == DataType::kInt16 && op == ReduceOp::kProduct) continue;
      for (int64_t n : {int64_t{100000}, int64_t{3}}) {  // several 64 KiB chunks, and a few
        Case c;
        c.type = type;
        c.op = op;
        c.salt = ++salt;
        if (isFloat(type) && (op == ReduceOp::kSum || op == ReduceOp::kAverage)) {
          c.pre = 0.5;
          c.post = 3.0;
        }
        c.tensor = s.input(type, {n}, rank, c.salt);
        cases.push_back(c);
      }
    }
  }
  for (Case& c : cases) {
    Request r;
    r.name = "ar." + std::to_string(c.salt);
    r.input = r.output = c.tensor;
    r.op = c.op;
    r.scaling = {c.pre, c.post};
    r.stream = s.id();
    c.handle = rt.enqueue(r);
  }
  s.release();
  for (Case& c : cases) {
    c.handle->wait(std::chrono::seconds(120));
    std::vector<unsigned char> got = s.read(*c.tensor);
    for (size_t i = 0; i < c.tensor->numel(); ++i) {
      double want = expectedAllreduce(c.type, c.op, size, i, c.salt, c.pre, c.post);
      double value = loadValue(c.type, got.data(), i);
      REQUIRE(value == want, dataTypeName(c.type)
                                 << " " << reduceOpName(c.op) << " element " << i << " of "
                                 << c.tensor->numel() << ": " << value << ", expected " << want);
    }
  }
}

void otherKinds(Runtime& rt, int rank, int size, int gpu) {
  GatedStream s(gpu);
  for (DataType type :
       {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kUInt8}) {
    s.hold();
    const std::string tag = dataTypeName(type);
    std::vector<std::function<void()>> checks;
    for (int k = 0; k < 2; ++k) {  // two of each, fused when the threshold allows
      auto in = s.input(type, {3000 + rank, 5}, rank, 10 + k);
      Request r;
      r.kind = RequestKind::kAllgather;
      r.name = "ag." + tag + std::to_string(k);
      r.input = in;
      r.stream = s.id();
      auto h = rt.enqueue(r);
      checks.push_back([&s, h, k, size, type] {
        h->wait(std::chrono::seconds(120));
        auto out = h->output();
        REQUIRE(out->device().kind == Device::Kind::kCuda, "allgather output on the GPU");
        std::vector<unsigned char> got = s.read(*out);
        size_t at = 0;
        for (int src = 0; src < size; ++src) {
          for (size_t i = 0; i < static_cast<size_t>(3000 + src) * 5; ++i, ++at)
            REQUIRE(loadValue(type, got.data(), at) == inputValue(type, src, i, 10 + k),
                    "allgather " << dataTypeName(type) << " from " << src << " element " << i);
        }
      });
      auto b = s.input(type, {20000 + k}, rank, 20 + k);
      const int root = size - 1;
      Request br;
      br.kind = RequestKind::kBroadcast;
      br.name = "bc." + tag + std::to_string(k);
      br.input = br.output = b;
      br.root = root;
      br.stream = s.id();
      auto bh = rt.enqueue(br);
      checks.push_back([&s, bh, b, k, type, root] {
        bh->wait(std::chrono::seconds(120));
        std::vector<unsigned char> got = s.read(*b);
        for (size_t i = 0; i < b->numel(); ++i)
          REQUIRE(loadValue(type, got.data(), i) == inputValue(type, root, i, 20 + k),
                  "broadcast " << dataTypeName(type) << " element " << i);
      });
    }
    {
      auto in = s.input(type, {static_cast<int64_t>(size) * 700, 3}, rank, 30);
      Request r;
      r.kind = RequestKind::kAlltoall;
      r.name = "a2a." + tag;
      r.input = in;
      r.stream = s.id();
      auto h = rt.enqueue(r);
      checks.push_back([&s, h, rank, size, type] {
        h->wait(std::chrono::seconds(120));
        std::vector<unsigned char> got = s.read(*h->output());
        const size_t block = 700 * 3;
        for (int src = 0; src < size; ++src) {
          for (size_t i = 0; i < block; ++i) {
            size_t sent = static_cast<size_t>(rank) * block + i;  // src's rows for this rank
            REQUIRE(loadValue(type, got.data(), static_cast<size_t>(src) * block + i) ==
                        inputValue(type, src, sent, 30),
                    "alltoall " << dataTypeName(type) << " from " << src << " element " << i);
          }
        }
      });
    }
    if (type != DataType::kUInt8) {
      auto in = s.input(type, {1001, 4}, rank, 40);
      Request r;
      r.kind = RequestKind::kReducescatter;
      r.name = "rs." + tag;
      r.input = in;
      r.stream = s.id();
      auto h = rt.enqueue(r);
      checks.push_back([&s, h, rank, size, type] {
        h->wait(std::chrono::seconds(120));
        std::vector<unsigned char> got = s.read(*h->output());
        size_t first = 0;  // rows of the ranks before this one: 1001 split as evenly as can be
        for (int r = 0; r < rank; ++r) first += (1001 / size + (r < 1001 % size ? 1 : 0)) * 4;
        for (size_t i = 0; i < h->output()->numel(); ++i)
          REQUIRE(loadValue(type, got.data(), i) ==
                      expectedReduction(type, ReduceOp::kSum, size, first + i, 40),
                  "reducescatter " << dataTypeName(type) << " element " << i);
      });
    }
    s.release();
    for (auto& c : checks) c();
  }
}

// Ranks sharing GPU 0 (as many as the machine runs), or one GPU each (rank r on GPU r), with
// forced host names to stand for several hosts.
struct GpuRanks {
  int ranks = 2;
  bool gpu_per_rank = false;
  std::vector<std::string> hosts;
};

void runGpuRanks(const Settings& settings,
                 const std::function<void(Runtime&, int rank, int size, int gpu)>& body,
                 const GpuRanks& layout = {}) {
  RankSpec spec;
  spec.size = layout.ranks;
  spec.hosts = layout.hosts;
  spec.timeout_seconds = 240;
  runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    body(*rt, ctx.rank, ctx.size, layout.gpu_per_rank ? ctx.rank : 0);
  });
}

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

// RONDE_GPU_OPERATIONS=auto, two ranks on one GPU: the runtime finds (by PCI bus id) that they
// share it, and stages instead of forming an NCCL communicator NCCL would refuse.
TEST(RuntimeStagingGpu, AutoStagesRanksSharingTheGpu) {
  SKIP_WITHOUT_GPU_IN_A_CHILD();
  Settings s = stagingSettings(64 << 20);
  s.gpu_operations = GpuOperations::kAuto;
  runGpuRanks(s, allreduceEverything);
}

Settings ncclSettings(int64_t fusion_threshold) {
  Settings s = stagingSettings(fusion_threshold);
  s.gpu_operations = GpuOperations::kNccl;
  return s;
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

#define SKIP_WITH_FEWER_GPUS_THAN(n)                                                        \
  do {                                                                                      \
    const int gpus_ = gpusSeenByAChild();                                                   \
    if (gpus_ < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, one per rank; sees " << gpus_; \
  } while (0)

const GpuRanks kThreeGpus{3, true, {}};

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
