// The emulated CUDA runtime's state and the helpers its C API (emulated_cuda_runtime.cc) is
// made of: devices, allocations, streams and events, one set per process.
#pragma once

#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "emulated_gpu.h"
#include "emulated_stream.h"

namespace ronde::emulated_gpu {

using Clock = std::chrono::steady_clock;

// RONDE_EMULATED_GPUS and RONDE_EMULATED_GPU_DELAY_US, or `fallback` when unset.
int environmentInt(const char* name, int fallback);

// An event: the point on a stream its last record stands for.
struct Event {
  explicit Event(unsigned flags) : flags(flags) {}
  const unsigned flags;
  std::mutex mutex;
  std::shared_ptr<Stream> stream;  // of the last record; null: never recorded
  uint64_t ticket = 0;
  Clock::time_point at{};  // when the recorded point was reached
};

constexpr size_t kDeviceMemory = size_t{16} << 30;  // each GPU's, as cudaMemGetInfo counts

// A cudaMalloc'd (kDevice) or cudaMallocHost'd (kPinned) block.
struct Allocation {
  size_t bytes;
  Region::Kind kind;
  int device;
};

// The process's emulated devices (one per process: processWide).
struct Emulator {
  const pid_t pid = ::getpid();
  const int devices = environmentInt("RONDE_EMULATED_GPUS", 4);
  const std::chrono::microseconds delay{environmentInt("RONDE_EMULATED_GPU_DELAY_US", 100)};
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;  // by start address
  std::map<const void*, std::shared_ptr<Stream>> streams;
  std::map<const void*, std::shared_ptr<Event>> events;
  std::vector<std::shared_ptr<Stream>> legacy = std::vector<std::shared_ptr<Stream>>(devices);
  std::atomic<int> sticky{cudaSuccess};  // a failed kernel's error: every later call returns it
};

Emulator& emulator();

extern thread_local int current_device;      // cudaSetDevice
extern thread_local cudaError_t last_error;  // cudaGetLastError

// Notes `error` as the thread's last error and returns it.
cudaError_t fail(cudaError_t error);
// The device's legacy default stream, started on first use.
std::shared_ptr<Stream> legacyStream(Emulator& e, int device);
// Null for a handle that is no stream. cudaStreamPerThread is taken as the legacy stream.
std::shared_ptr<Stream> resolve(cudaStream_t handle);
// Queues `work` with the legacy stream's implicit ordering against blocking streams; returns
// its ticket on `stream`.
uint64_t submit(Stream& stream, std::function<void()> work);
// Runs `work` after the emulated delay.
void delayed(const std::function<void()>& work);
// Waits for every stream of `device` (-1: of every device).
void synchronizeDevice(int device);
// cudaMemcpy(Async) on `handle`, with CUDA's rules for pageable memory.
cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                 cudaStream_t handle);
// cudaMemset(Async) on `handle`; `wait`: returns once it is done.
cudaError_t fill(void* dst, int value, size_t bytes, cudaStream_t handle, bool wait);
cudaError_t allocate(void** p, size_t bytes, Region::Kind kind);
// Waits for the device first, as cudaFree and cudaFreeHost do.
cudaError_t release(void* p, Region::Kind kind);
std::shared_ptr<Event> findEvent(cudaEvent_t handle);
bool validDevice(int device);

}  // namespace ronde::emulated_gpu
