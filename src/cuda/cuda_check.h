// CUDA runtime errors as ronde errors: a failed CUDA call throws Error(kIo) naming the call and
// CUDA's own name and text for the error. Included by CUDA code only.
#pragma once

#include <cuda_runtime.h>

#include "ronde/errors.h"

namespace ronde::cuda {

inline void checkCuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw makeError(ErrorCode::kIo, "CUDA error in ", what, ": ", cudaGetErrorName(status), " (",
                  cudaGetErrorString(status), ")");
}

}  // namespace ronde::cuda
