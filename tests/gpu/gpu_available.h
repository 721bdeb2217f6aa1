// Whether this process sees a GPU, asked the way the GPU tests skip: cudaGetDeviceCount.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace ronde::testing {

// Empty when a GPU is visible; else why not, for GTEST_SKIP.
inline std::string noGpuReason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    return std::string("no GPU visible: cudaGetDeviceCount returned ") + cudaGetErrorName(status) +
           " (" + cudaGetErrorString(status) + ")";
  }
  if (count == 0) return "no GPU visible: cudaGetDeviceCount found 0 devices";
  return "";
}

#define RONDE_SKIP_WITHOUT_GPU()                                       \
  do {                                                                 \
    const std::string ronde_no_gpu_ = ::ronde::testing::noGpuReason(); \
    if (!ronde_no_gpu_.empty()) GTEST_SKIP() << ronde_no_gpu_;         \
  } while (0)

}  // namespace ronde::testing
