// CUDA GPUs and NCCL emulated on the host, so that ronde's CUDA and NCCL code runs, with
// several ranks, on machines without a GPU (CI has nvcc's headers and NCCL's wheel, no GPU).
//
// A test build (-DRONDE_EMULATED_GPU=ON, scripts/test_emulated_gpu.sh) compiles ronde's CUDA
// host code and NCCL backend against the real cuda_runtime.h and nccl.h, and links them to
// these files instead of libcudart and libnccl:
//   emulated_cuda_runtime.cc  the CUDA runtime calls ronde and its GPU tests make: devices,
//                             memory, streams (a thread each, running its work in order:
//                             emulated_stream.h), events, cross-stream waits, the legacy
//                             default stream's implicit synchronisation, sticky errors; made of
//                             emulated_cuda_state.{h,cc};
//   emulated_nccl.cc          NCCL's API: communicators and collectives, run on the stream by a
//                             host Communicator of ronde's (TCP on loopback) among the ranks
//                             (emulated_nccl_comm.{h,cc});
//   emulated_batched_copy.cc  the fusion kernel: its own body (src/cuda/batched_copy_kernel.h)
//                             run on the stream for every block and thread of each launch.
// What a GPU would fault on, the emulation refuses: copies whose kind disagrees with where
// the memory is, kernels and NCCL calls on pageable memory or on another GPU's, two ranks of
// one NCCL communicator on one GPU. Device memory starts filled with 0xA5, as a real GPU's is
// not zeroed, and every copy, kernel and collective waits RONDE_EMULATED_GPU_DELAY_US (default
// 100) before it runs, so work read before it was waited for reads the wrong bytes.
// RONDE_EMULATED_GPUS (default 4) is how many GPUs each process sees, with the same PCI bus
// ids in every process, as on one host.
//
// State is process-wide, as the CUDA runtime's is, and starts afresh in a forked child (whose
// parent's stream threads did not come with it).
#pragma once

#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <functional>

namespace ronde::emulated_gpu {

// Where the bytes [p, p + bytes) lie: all inside one device allocation (device >= 0), inside
// one pinned host allocation, or anywhere else (pageable host memory).
struct Region {
  enum class Kind { kPageable, kPinned, kDevice };
  Kind kind = Kind::kPageable;
  int device = -1;
};
Region regionOf(const void* p, size_t bytes);

// Queues `work` on `stream` (null: the current device's legacy default stream): it runs on
// the stream's thread after everything queued there before, after the emulated delay.
// cudaErrorInvalidResourceHandle for a stream that is not one.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work);

// The device a stream belongs to; -1 for a stream that is not one.
int deviceOf(cudaStream_t stream);

// The calling thread's current device (cudaSetDevice).
int currentDevice();

// This process's one T (T has a member `const pid_t pid = ::getpid();`), made on first use
// and leaked on purpose: a forked child makes its own, since its parent's threads did not come
// with it and it must not touch the parent's locks.
template <typename T>
T& processWide() {
  static std::atomic<T*> current{nullptr};
  T* existing = current.load();
  if (existing != nullptr && existing->pid == ::getpid()) return *existing;
  auto* fresh = new T();
  if (current.compare_exchange_strong(existing, fresh)) return *fresh;
  delete fresh;  // another thread of this process made it first
  return *existing;
}

}  // namespace ronde::emulated_gpu
