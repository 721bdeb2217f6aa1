// What the runtime asks of a device to run collectives on its tensors through host memory: the
// small copy interface the host-staging pipeline (device_staging.h) is written against.
// Implemented by CUDA (device_cuda.cc, builds with CUDA only: two streams, pinned memory, the
// batched copy kernels) and by host memory standing in for a device (device_host_memory.h,
// every build), on which the CPU tests run the same pipeline and the same executor path.
//
// Work goes to two in-order queues: kIn (what reads the caller's inputs: device-side packing
// and device-to-host copies) and kOut (host-to-device copies and unpacking into the outputs),
// so that copies in the two directions overlap. Both wait on the requests' ready events first.
//
// Threads: markReady() is called on the callers' threads (enqueue) and must be thread-safe;
// everything else runs on the runtime's background thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "cuda/batched_copy.h"
#include "ronde/runtime.h"

namespace ronde::runtime {

// The point of a caller's stream after which a request's input is ready (a CUDA event).
class ReadyEvent {
 public:
  virtual ~ReadyEvent() = default;
};

class DeviceOps {
 public:
  enum class Queue { kIn, kOut };

  virtual ~DeviceOps() = default;
  virtual Device device() const = 0;
  // What tells this GPU from every other of its host, whatever CUDA_VISIBLE_DEVICES renumbered
  // (CUDA: its PCI bus id): two ranks of a host with the same identity share one GPU.
  virtual std::string identity() const = 0;

  // At enqueue: records the current point of `stream` (Request::stream).
  virtual std::shared_ptr<ReadyEvent> markReady(uintptr_t stream) = 0;
  // Work issued to either queue from now on starts after `event` (the device waits, not the
  // host).
  virtual void waitReady(const ReadyEvent& event) = 0;

  // Scratch kept between operations and grown to need, one of each per device: the device
  // fusion buffer and the pinned host staging buffer. Growing either invalidates pointers
  // handed out before; callers size them once per operation.
  virtual void* deviceBuffer(size_t bytes) = 0;
  virtual unsigned char* hostBuffer(size_t bytes) = 0;
  // A new tensor in this device's memory (outputs whose request gave no output or allocator).
  virtual std::shared_ptr<Tensor> newTensor(DataType type, const std::vector<int64_t>& shape) = 0;

  // Asynchronous work in issue order on its queue. toHost returns a ticket that waitToHost
  // blocks on (until `deadline`: then Error(kTimeout)).
  virtual uint64_t toHost(unsigned char* host, const void* device, size_t bytes) = 0;
  virtual void waitToHost(uint64_t ticket, Deadline deadline) = 0;
  virtual void toDevice(void* device, const unsigned char* host, size_t bytes) = 0;
  // The batched copy kernel (pack with prescale, unpack with postscale) on `queue`.
  virtual void copyOnDevice(Queue queue, const std::vector<cuda::CopySegment>& segments,
                            const cuda::CopyConversion& conversion) = 0;
  virtual void zeroOnDevice(Queue queue, void* device, size_t bytes) = 0;
  // The host waits until everything issued to `queue` so far has finished (Error(kTimeout) at
  // `deadline`): before a device communicator, which runs on a stream of its own, reads what
  // the queue packed or what the requests' ready events guard.
  virtual void synchronize(Queue queue, Deadline deadline) = 0;

  // Ends an operation: `stream` waits (on the device) for everything issued to kOut, and the
  // host waits until both queues are idle, so that the outputs are ready on the caller's stream
  // when the handle completes and the staging buffers may be reused.
  virtual void finish(uintptr_t stream, Deadline deadline) = 0;
  // After a failure mid-operation: waits (bounded) until no copy still uses the buffers;
  // never throws.
  virtual void drain() noexcept = 0;
};

// Makes the DeviceOps of one device (called once per device index, on first use).
using DeviceOpsFactory = std::function<std::unique_ptr<DeviceOps>(Device device)>;

}  // namespace ronde::runtime
