// A device whose memory is host memory: the DeviceOps the CPU tests run the host-staging
// pipeline and the executor's device path on, with the same asynchrony as a GPU (each queue is
// a worker thread working in issue order), optional delay per copy (so that a missing wait reads
// stale bytes, not lucky ones), and a copy that fails on request, as a CUDA error surfaces at
// the next synchronisation. Tensors claiming this device are host memory (HostDeviceTensor).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "runtime/device_ops.h"

namespace ronde::runtime {

struct HostMemoryDeviceOptions {
  // Each copy sleeps this long first: device-to-host, host-to-device and on the device.
  std::chrono::microseconds copy_delay{0};
  int64_t fail_at_copy = -1;  // >= 0: this copy (counted from 0, both directions) fails
};

// A host tensor that says it lives on `device`.
class HostDeviceTensor final : public Tensor {
 public:
  HostDeviceTensor(DataType type, std::vector<int64_t> shape, Device device)
      : host_(type, std::move(shape)), device_(device) {}
  DataType dtype() const override { return host_.dtype(); }
  std::vector<int64_t> shape() const override { return host_.shape(); }
  Device device() const override { return device_; }
  void* data() override { return host_.data(); }

 private:
  HostTensor host_;
  Device device_;
};

class HostMemoryDevice final : public DeviceOps {
 public:
  HostMemoryDevice(Device device, HostMemoryDeviceOptions options);
  ~HostMemoryDevice() override;

  Device device() const override { return device_; }
  std::string identity() const override {
    return "host-memory:" + std::to_string(device_.index);
  }
  std::shared_ptr<ReadyEvent> markReady(uintptr_t stream) override;
  void waitReady(const ReadyEvent& event) override;
  void* deviceBuffer(size_t bytes) override;
  unsigned char* hostBuffer(size_t bytes) override;
  std::shared_ptr<Tensor> newTensor(DataType type, const std::vector<int64_t>& shape) override;
  uint64_t toHost(unsigned char* host, const void* device, size_t bytes) override;
  void waitToHost(uint64_t ticket, Deadline deadline) override;
  void toDevice(void* device, const unsigned char* host, size_t bytes) override;
  void copyOnDevice(Queue queue, const std::vector<cuda::CopySegment>& segments,
                    const cuda::CopyConversion& conversion) override;
  void zeroOnDevice(Queue queue, void* device, size_t bytes) override;
  void synchronize(Queue queue, Deadline deadline) override;
  void finish(uintptr_t stream, Deadline deadline) override;
  void drain() noexcept override;

  // What the tests check: the streams of the ready events waited on, and of finish(), in order.
  std::vector<uintptr_t> waitedStreams();
  std::vector<uintptr_t> finishedStreams();
  uint64_t copies();  // copies issued (both directions)

 private:
  class Worker;
  uint64_t copy(Worker& worker, void* dst, const void* src, size_t bytes);

  Device device_;
  HostMemoryDeviceOptions options_;
  std::unique_ptr<Worker> in_;
  std::unique_ptr<Worker> out_;
  std::vector<unsigned char> device_buffer_;
  std::vector<unsigned char> host_buffer_;
  std::mutex mutex_;  // guards the three below (markReady runs on any thread)
  std::vector<uintptr_t> waited_;
  std::vector<uintptr_t> finished_;
  int64_t copies_ = 0;
};

// A factory for DeviceSet: every device index a HostMemoryDevice with `options`.
DeviceOpsFactory hostMemoryDevices(HostMemoryDeviceOptions options = {});

}  // namespace ronde::runtime
