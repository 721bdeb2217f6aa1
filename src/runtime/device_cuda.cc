#include "runtime/device_cuda.h"

#include <cuda_runtime.h>

#include <mutex>
#include <thread>

#include "cuda/cuda_check.h"

namespace ronde::runtime {
namespace {

using cuda::checkCuda;

// Makes `index` the calling thread's current device until destroyed.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    checkCuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index)
      checkCuda(cudaSetDevice(index), "cudaSetDevice");
    else
      previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

cudaEvent_t newEvent() {
  cudaEvent_t event = nullptr;
  checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  return event;
}

// Polls `event` until it completed: the runtime's waits all have a deadline, which
// cudaEventSynchronize does not.
void waitEvent(cudaEvent_t event, Deadline deadline, const char* what) {
  for (uint64_t polls = 0;; ++polls) {
    cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) checkCuda(status, what);
    if (deadline.expired())
      throw makeError(ErrorCode::kTimeout, what, ": the device's copies did not finish in time");
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

class CudaReadyEvent final : public ReadyEvent {
 public:
  explicit CudaReadyEvent(cudaEvent_t event) : event(event) {}
  ~CudaReadyEvent() override { cudaEventDestroy(event); }  // released once it has completed
  cudaEvent_t event;
};

// Device memory owned by the runtime (outputs no allocator provided).
class CudaTensor final : public Tensor {
 public:
  CudaTensor(DataType type, std::vector<int64_t> shape, Device device)
      : type_(type), shape_(std::move(shape)), device_(device) {
    DeviceGuard guard(device.index);
    size_t bytes = std::max<size_t>(numel() * dataTypeSize(type), 1);
    checkCuda(cudaMalloc(&data_, bytes), "cudaMalloc");
  }
  ~CudaTensor() override {
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(device_.index);
    cudaFree(data_);
    if (previous >= 0) cudaSetDevice(previous);
  }
  DataType dtype() const override { return type_; }
  std::vector<int64_t> shape() const override { return shape_; }
  Device device() const override { return device_; }
  void* data() override { return data_; }

 private:
  DataType type_;
  std::vector<int64_t> shape_;
  Device device_;
  void* data_ = nullptr;
};

size_t roundUp(size_t bytes) {
  constexpr size_t kGranule = 1 << 20;  // regrowth by a few bytes would reallocate every step
  return (bytes + kGranule - 1) / kGranule * kGranule;
}

class CudaDeviceOps final : public DeviceOps {
 public:
  explicit CudaDeviceOps(Device device) : device_(device) {
    DeviceGuard guard(device_.index);
    checkCuda(cudaStreamCreateWithFlags(&in_, cudaStreamNonBlocking), "cudaStreamCreate");
    checkCuda(cudaStreamCreateWithFlags(&out_, cudaStreamNonBlocking), "cudaStreamCreate");
    in_done_ = newEvent();
    out_done_ = newEvent();
  }
  ~CudaDeviceOps() override {
    drain();
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(device_.index);
    for (cudaEvent_t event : tickets_) cudaEventDestroy(event);
    cudaEventDestroy(in_done_);
    cudaEventDestroy(out_done_);
    cudaStreamDestroy(in_);
    cudaStreamDestroy(out_);
    if (device_buffer_ != nullptr) cudaFree(device_buffer_);
    if (host_buffer_ != nullptr) cudaFreeHost(host_buffer_);
    if (previous >= 0) cudaSetDevice(previous);
  }

  Device device() const override { return device_; }

  std::string identity() const override {
    char bus_id[64] = {};
    checkCuda(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_.index),
              "cudaDeviceGetPCIBusId");
    return std::string("pci:") + bus_id;
  }

  std::shared_ptr<ReadyEvent> markReady(uintptr_t stream) override {
    DeviceGuard guard(device_.index);
    auto ready = std::make_shared<CudaReadyEvent>(newEvent());
    checkCuda(cudaEventRecord(ready->event, reinterpret_cast<cudaStream_t>(stream)),
              "cudaEventRecord on the request's stream");
    return ready;
  }

  void waitReady(const ReadyEvent& event) override {
    DeviceGuard guard(device_.index);
    cudaEvent_t e = static_cast<const CudaReadyEvent&>(event).event;
    checkCuda(cudaStreamWaitEvent(in_, e, 0), "cudaStreamWaitEvent");
    checkCuda(cudaStreamWaitEvent(out_, e, 0), "cudaStreamWaitEvent");
  }

  void* deviceBuffer(size_t bytes) override {
    if (bytes > device_bytes_) {
      DeviceGuard guard(device_.index);
      if (device_buffer_ != nullptr) checkCuda(cudaFree(device_buffer_), "cudaFree");
      device_buffer_ = nullptr;
      device_bytes_ = 0;
      checkCuda(cudaMalloc(&device_buffer_, roundUp(bytes)), "cudaMalloc (fusion buffer)");
      device_bytes_ = roundUp(bytes);
    }
    return device_buffer_;
  }

  unsigned char* hostBuffer(size_t bytes) override {
    if (bytes > host_bytes_) {
      DeviceGuard guard(device_.index);
      if (host_buffer_ != nullptr) checkCuda(cudaFreeHost(host_buffer_), "cudaFreeHost");
      host_buffer_ = nullptr;
      host_bytes_ = 0;
      void* memory = nullptr;
      checkCuda(cudaHostAlloc(&memory, roundUp(bytes), cudaHostAllocPortable),
                "cudaHostAlloc (staging buffer)");
      host_buffer_ = static_cast<unsigned char*>(memory);
      host_bytes_ = roundUp(bytes);
    }
    return host_buffer_;
  }

  std::shared_ptr<Tensor> newTensor(DataType type, const std::vector<int64_t>& shape) override {
    return std::make_shared<CudaTensor>(type, shape, device_);
  }

  uint64_t toHost(unsigned char* host, const void* device, size_t bytes) override {
    DeviceGuard guard(device_.index);
    checkCuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, in_),
              "cudaMemcpyAsync (device to host)");
    if (next_ticket_ == tickets_.size()) tickets_.push_back(newEvent());
    checkCuda(cudaEventRecord(tickets_[next_ticket_], in_), "cudaEventRecord");
    return next_ticket_++;
  }

  void waitToHost(uint64_t ticket, Deadline deadline) override {
    waitEvent(tickets_.at(ticket), deadline, "a device-to-host staging copy");
  }

  void toDevice(void* device, const unsigned char* host, size_t bytes) override {
    DeviceGuard guard(device_.index);
    checkCuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, out_),
              "cudaMemcpyAsync (host to device)");
  }

  void copyOnDevice(Queue queue, const std::vector<cuda::CopySegment>& segments,
                    const cuda::CopyConversion& conversion) override {
    DeviceGuard guard(device_.index);
    cuda::launchBatchedCopy(segments, conversion, queue == Queue::kIn ? in_ : out_);
  }

  void zeroOnDevice(Queue queue, void* device, size_t bytes) override {
    DeviceGuard guard(device_.index);
    checkCuda(cudaMemsetAsync(device, 0, bytes, queue == Queue::kIn ? in_ : out_),
              "cudaMemsetAsync");
  }

  void synchronize(Queue queue, Deadline deadline) override {
    DeviceGuard guard(device_.index);
    cudaEvent_t done = queue == Queue::kIn ? in_done_ : out_done_;
    checkCuda(cudaEventRecord(done, queue == Queue::kIn ? in_ : out_), "cudaEventRecord");
    waitEvent(done, deadline, "the device's packing copies");
  }

  void finish(uintptr_t stream, Deadline deadline) override {
    DeviceGuard guard(device_.index);
    checkCuda(cudaEventRecord(out_done_, out_), "cudaEventRecord");
    checkCuda(cudaEventRecord(in_done_, in_), "cudaEventRecord");
    // The caller's later work on its stream is ordered after the outputs, on the device.
    checkCuda(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(stream), out_done_, 0),
              "cudaStreamWaitEvent on the request's stream");
    waitEvent(in_done_, deadline, "the staging copies");
    waitEvent(out_done_, deadline, "the staging copies");
    next_ticket_ = 0;
  }

  void drain() noexcept override {
    try {
      DeviceGuard guard(device_.index);
      auto deadline = Deadline::after(std::chrono::seconds(30));
      if (cudaEventRecord(in_done_, in_) == cudaSuccess) waitEvent(in_done_, deadline, "drain");
      if (cudaEventRecord(out_done_, out_) == cudaSuccess) waitEvent(out_done_, deadline, "drain");
    } catch (...) {
    }
    cudaGetLastError();  // a failed operation's error is not the next one's
    next_ticket_ = 0;
  }

 private:
  Device device_;
  cudaStream_t in_ = nullptr;
  cudaStream_t out_ = nullptr;
  cudaEvent_t in_done_ = nullptr;
  cudaEvent_t out_done_ = nullptr;
  std::vector<cudaEvent_t> tickets_;  // reused: ticket i is event i of the operation
  uint64_t next_ticket_ = 0;
  void* device_buffer_ = nullptr;
  size_t device_bytes_ = 0;
  unsigned char* host_buffer_ = nullptr;
  size_t host_bytes_ = 0;
};

}  // namespace

std::unique_ptr<DeviceOps> makeCudaDeviceOps(Device device) {
  return std::make_unique<CudaDeviceOps>(device);
}

int visibleCudaDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // not this process's next error
    return 0;
  }
  return count;
}

}  // namespace ronde::runtime
