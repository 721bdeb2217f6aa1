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

// What `ask` returns when called in a forked child: a parent that touched CUDA before fork()
// leaves its children unable to use it, so tests that fork their ranks ask CUDA in a child.
// `unasked` when no child could be started.
inline std::string askedInAChild(std::string (*ask)(), const std::string& unasked) {
  int fds[2];
  if (pipe(fds) != 0) return unasked;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return unasked;
  }
  if (pid == 0) {
    close(fds[0]);
    const std::string answer = ask();
    ssize_t ignored = write(fds[1], answer.data(), answer.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string answer;
  char buffer[256];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) answer.append(buffer, n);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return answer;
}

// noGpuReason(), asked in a child.
inline std::string noGpuReasonFromAChild() {
  return askedInAChild(noGpuReason, "could not start a child process to ask CUDA");
}

// How many GPUs a child process sees.
inline int gpusSeenByAChild() {
  const std::string count = askedInAChild([] {
    int n = 0;
    return std::to_string(cudaGetDeviceCount(&n) == cudaSuccess ? n : 0);
  }, "0");
  return count.empty() ? 0 : std::stoi(count);
}

#define RONDE_SKIP_WITHOUT_GPU()                                       \
  do {                                                                 \
    const std::string ronde_no_gpu_ = ::ronde::testing::noGpuReason(); \
    if (!ronde_no_gpu_.empty()) GTEST_SKIP() << ronde_no_gpu_;         \
  } while (0)

}  // namespace ronde::testing
