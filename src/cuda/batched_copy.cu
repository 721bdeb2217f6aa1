// The device side of batched_copy.h: one kernel per converter (batched_copy_kernel.h), each
// covering a whole table of segments per launch. Each block copies kElementsPerBlock elements
// of one segment, found by binary search over the table's first_block column.
#include <cuda_runtime.h>

#include "cuda/batched_copy.h"
#include "cuda/batched_copy_kernel.h"
#include "cuda/cuda_check.h"

namespace ronde::cuda {
namespace {

template <class Convert>
__global__ void __launch_bounds__(kThreadsPerBlock)
    batchedCopyKernel(const __grid_constant__ kernel::LaunchTable table, Convert convert) {
  kernel::copyThread(table, convert, blockIdx.x, threadIdx.x);
}

struct LaunchOnStream {
  cudaStream_t stream;
  template <class Convert>
  void operator()(const LaunchPlan& plan, Convert convert) const {
    // Per thread: 24 KiB is too much for the caller's stack to hold comfortably on every call.
    thread_local kernel::LaunchTable table;
    for (const Launch& launch : plan.launches) {
      kernel::fillTable(launch, table);
      batchedCopyKernel<Convert>
          <<<static_cast<unsigned>(launch.blocks), kThreadsPerBlock, 0, stream>>>(table, convert);
      checkCuda(cudaGetLastError(), "launching the batched copy kernel");
    }
  }
};

}  // namespace

bool deviceCopiesBuilt() { return true; }

void launchBatchedCopy(const std::vector<CopySegment>& segments, const CopyConversion& c,
                       void* stream) {
  const LaunchPlan plan = planLaunches(segments, c);
  if (plan.launches.empty()) return;
  kernel::dispatch(plan, c, LaunchOnStream{static_cast<cudaStream_t>(stream)});
}

}  // namespace ronde::cuda
