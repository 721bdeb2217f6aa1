// The fusion kernel of src/cuda/batched_copy.cu, emulated: the host reference, queued on the
// stream. As the kernel would fault on them, sources and destinations must be device memory
// of the stream's GPU or pinned host memory; anything else is the launch error a GPU reports
// for an illegal address.
#include <cuda_runtime.h>

#include "cuda/batched_copy.h"
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

}  // namespace

bool deviceCopiesBuilt() { return true; }

void launchBatchedCopy(const std::vector<CopySegment>& segments, const CopyConversion& conversion,
                       void* stream) {
  checkConversion(conversion);
  const auto handle = static_cast<cudaStream_t>(stream);
  const int device = emulated_gpu::deviceOf(handle);
  for (const CopySegment& s : segments) {
    checkReachable(s.src, s.count * dataTypeSize(conversion.src_type), device, "a source");
    checkReachable(s.dst, s.count * dataTypeSize(conversion.dst_type), device, "a destination");
  }
  const cudaError_t status = emulated_gpu::enqueue(
      handle, [segments, conversion] { referenceBatchedCopy(segments, conversion); });
  if (status != cudaSuccess) {
    throw makeError(ErrorCode::kIo, "CUDA error in the batched copy kernel's launch: ",
                    cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
  }
}

}  // namespace ronde::cuda
