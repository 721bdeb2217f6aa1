// Whether this process sees a GPU, asked the way the GPU tests skip: cudaGetDeviceCount.
#pragma once

#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

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

// How many GPUs a child process sees: asked in a child, because a parent that touched CUDA
// before fork() leaves its children unable to use it (the multi-rank tests fork their ranks).
inline int gpusSeenByAChild() {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    ssize_t ignored = write(fds[1], &count, sizeof(count));
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  int count = 0;
  if (read(fds[0], &count, sizeof(count)) != static_cast<ssize_t>(sizeof(count))) count = 0;
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return count;
}

#define RONDE_SKIP_WITHOUT_GPU()                                       \
  do {                                                                 \
    const std::string ronde_no_gpu_ = ::ronde::testing::noGpuReason(); \
    if (!ronde_no_gpu_.empty()) GTEST_SKIP() << ronde_no_gpu_;         \
  } while (0)

}  // namespace ronde::testing
