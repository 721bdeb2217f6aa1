// What the runtime's GPU tests share: CUDA tensors, a stream whose work can be held behind a
// gate, the every-collective checks, and forked ranks on one GPU or on a GPU each.
//
// Each rank produces its inputs on a stream of its own behind a gate, a host callback that
// holds the stream until the rank has enqueued every request, so a runtime that read them
// without waiting on the request's ready event would read the zeros that were there before;
// outputs are read back on that same stream right after the handle completes, with no device
// synchronisation in between.
//
// CUDA is initialised in the children only: a parent that touched CUDA before fork() leaves its
// children unable to use it, so even the skip probes run in a child process.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu_available.h"
#include "ronde/runtime.h"

namespace ronde::testing {

#define SKIP_WITHOUT_GPU_IN_A_CHILD()                                            \
  do {                                                                           \
    const std::string ronde_no_gpu_ = ::ronde::testing::noGpuReasonFromAChild(); \
    if (!ronde_no_gpu_.empty()) GTEST_SKIP() << ronde_no_gpu_;                   \
  } while (0)

#define SKIP_WITH_FEWER_GPUS_THAN(n)                                                        \
  do {                                                                                      \
    const int gpus_ = ::ronde::testing::gpusSeenByAChild();                                 \
    if (gpus_ < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, one per rank; sees " << gpus_; \
  } while (0)

// Fails the rank (REQUIRE) with `what` and CUDA's words for `status`.
void check(cudaError_t status, const char* what);

class CudaTensor final : public Tensor {
 public:
  CudaTensor(DataType type, std::vector<int64_t> shape, int gpu = 0);
  ~CudaTensor() override;
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

  explicit GatedStream(int gpu);
  ~GatedStream();
  uintptr_t id() const { return reinterpret_cast<uintptr_t>(stream); }

  // Work queued from now on waits until release() (or 60 s: a test that forgot does not hang).
  void hold();
  // Opens the gate 100 ms from now: long after a runtime that did not wait for the inputs
  // (the requests' ready events) would have read them.
  void release();

  // A device tensor holding inputValue(type, rank, i, salt), written on the stream.
  std::shared_ptr<CudaTensor> input(DataType type, std::vector<int64_t> shape, int rank, int salt);
  // The tensor's bytes, read on the stream (ordered after the runtime's copies, if it kept its
  // promise).
  std::vector<unsigned char> read(Tensor& t);
};

// Host staging in 64 KiB chunks, fusing up to `fusion_threshold` bytes.
Settings stagingSettings(int64_t fusion_threshold);
// The same on the NCCL backend (RONDE_GPU_OPERATIONS=nccl).
Settings ncclSettings(int64_t fusion_threshold);

// Every dtype x op, several chunks and a few elements, scaled where it applies, held behind
// the gate: checked against expectedAllreduce.
void allreduceEverything(Runtime& rt, int rank, int size, int gpu);
// Allgather, broadcast, alltoall and reducescatter of four dtypes, two of each where they fuse.
void otherKinds(Runtime& rt, int rank, int size, int gpu);
// Adasum of float32, float64 and float16 tensors, checked against its definition
// (support/adasum_reference.h) with `ranks_per_host` consecutive ranks to a host.
void adasumOfCudaTensors(Runtime& rt, int rank, int size, int gpu, int ranks_per_host);

// Ranks sharing GPU 0 (as many as the machine runs), or one GPU each (rank r on GPU r), with
// forced host names to stand for several hosts.
struct GpuRanks {
  int ranks = 2;
  bool gpu_per_rank = false;
  std::vector<std::string> hosts;
};

using GpuRankBody = std::function<void(Runtime&, int rank, int size, int gpu)>;
void runGpuRanks(const Settings& settings, const GpuRankBody& body, const GpuRanks& layout = {});

}  // namespace ronde::testing
