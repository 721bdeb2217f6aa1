// The fusion kernel of src/cuda/batched_copy.cu, emulated: its own body
// (src/cuda/batched_copy_kernel.h), run for every block and thread of each launch in turn on
// the stream. As the kernel would fault on them, sources and destinations must be device
// memory of the stream's GPU or pinned host memory; anything else is the launch error a GPU
// reports for an illegal address.
#include <cuda_runtime.h>

#include <memory>

#include "cuda/batched_copy.h"
#include "cuda/batched_copy_kernel.h"
#include "emulated_gpu.h"
#include "ronde/errors.h"

namespace ronde::cuda {
namespace {

void checkReachable(const void* p, size_t bytes, int device, const char* which) {
  if (bytes == 0) return;
  const emulated_gpu::Region region = emulated_gpu::regionOf(p, bytes);
  const bool reachable =
      region.kind == emulated_gpu::Region::Kind::kPinned ||
      (region.kind == emulated_gpu::Region::Kind::kDevice && region.device == device);
  if (!reachable) {
    throw makeError(ErrorCode::kIo, "CUDA error in the batched copy kernel: ",
                    cudaGetErrorName(cudaErrorIllegalAddress), " (", which, " of ", bytes,
                    " bytes is neither memory of GPU ", device, " nor pinned host memory)");
  }
}

// What a launch on the GPU does, queued on the emulated stream: every thread of every block.
struct LaunchOnEmulatedStream {
  cudaStream_t stream;
  template <class Convert>
  void operator()(const LaunchPlan& plan, Convert convert) const {
    for (const Launch& launch : plan.launches) {
      auto table = std::make_shared<kernel::LaunchTable>();
      kernel::fillTable(launch, *table);
      const uint64_t blocks = launch.blocks;
      const cudaError_t status = emulated_gpu::enqueue(stream, [table, convert, blocks] {
        for (uint64_t block = 0; block < blocks; ++block) {
          for (uint32_t thread = 0; thread < kThreadsPerBlock; ++thread) {
            kernel::copyThread(*table, convert, block, thread);
          }
        }
      });
      if (status != cudaSuccess) {
        throw makeError(ErrorCode::kIo, "CUDA error in launching the batched copy kernel: ",
                        cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
      }
    }
  }
};

}  // namespace

bool deviceCopiesBuilt() { return true; }

void launchBatchedCopy(const std::vector<CopySegment>& segments, const CopyConversion& conversion,
                       void* stream) {
  const LaunchPlan plan = planLaunches(segments, conversion);
  if (plan.launches.empty()) return;
  const auto handle = static_cast<cudaStream_t>(stream);
  const int device = emulated_gpu::deviceOf(handle);
  for (const CopySegment& s : segments) {
    checkReachable(s.src, s.count * dataTypeSize(conversion.src_type), device, "a source");
    checkReachable(s.dst, s.count * dataTypeSize(conversion.dst_type), device, "a destination");
  }
  kernel::dispatch(plan, conversion, LaunchOnEmulatedStream{handle});
}

}  // namespace ronde::cuda
