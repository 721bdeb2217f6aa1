#include "runtime/device_host_memory.h"

#include <cstring>

namespace ronde::runtime {
namespace {

class HostReadyEvent final : public ReadyEvent {
 public:
  explicit HostReadyEvent(uintptr_t stream) : stream(stream) {}
  uintptr_t stream;
};

}  // namespace

// One in-order queue: a thread running tasks as a stream runs work. The first task to fail
// keeps its error; later tasks still run (as a GPU goes on), and a wait that covers the failed
// task throws it. A wait for earlier tasks does not: their copies landed, as an event recorded
// before a failed copy completes on a GPU.
class HostMemoryDevice::Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  uint64_t push(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    cv_.notify_all();
    return issued_++;
  }

  // Until tasks [0, count) are done; rethrows the queue's first error if it is among them.
  void waitFor(uint64_t count, Deadline deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_until(lock, deadline.at(), [&] { return done_ >= count; })) {
      throw makeError(ErrorCode::kTimeout,
                      "host-memory device: copies still running at the "
                      "deadline");
    }
    if (error_ && error_task_ < count) std::rethrow_exception(error_);
  }
  void waitAll(Deadline deadline) {
    uint64_t count;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      count = issued_;
    }
    waitFor(count, deadline);
  }
  void clearError() {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = nullptr;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      std::exception_ptr error;
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !error_) {
        error_ = error;
        error_task_ = done_;
      }
      ++done_;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  uint64_t issued_ = 0;
  uint64_t done_ = 0;
  std::exception_ptr error_;
  uint64_t error_task_ = 0;  // the index of the task that failed first
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

HostMemoryDevice::HostMemoryDevice(Device device, HostMemoryDeviceOptions options)
    : device_(device),
      options_(options),
      in_(std::make_unique<Worker>()),
      out_(std::make_unique<Worker>()) {}

HostMemoryDevice::~HostMemoryDevice() { drain(); }

std::shared_ptr<ReadyEvent> HostMemoryDevice::markReady(uintptr_t stream) {
  return std::make_shared<HostReadyEvent>(stream);
}

void HostMemoryDevice::waitReady(const ReadyEvent& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  waited_.push_back(static_cast<const HostReadyEvent&>(event).stream);
}

void* HostMemoryDevice::deviceBuffer(size_t bytes) {
  if (device_buffer_.size() < bytes) device_buffer_.resize(bytes);
  return device_buffer_.data();
}

unsigned char* HostMemoryDevice::hostBuffer(size_t bytes) {
  if (host_buffer_.size() < bytes) host_buffer_.resize(bytes);
  return host_buffer_.data();
}

std::shared_ptr<Tensor> HostMemoryDevice::newTensor(DataType type,
                                                    const std::vector<int64_t>& shape) {
  return std::make_shared<HostDeviceTensor>(type, shape, device_);
}

uint64_t HostMemoryDevice::copy(Worker& worker, void* dst, const void* src, size_t bytes) {
  bool fail;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fail = copies_++ == options_.fail_at_copy;
  }
  auto delay = options_.copy_delay;
  return worker.push([=] {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (fail) throw makeError(ErrorCode::kIo, "host-memory device: injected copy failure");
    if (bytes > 0) std::memcpy(dst, src, bytes);
  });
}

uint64_t HostMemoryDevice::toHost(unsigned char* host, const void* device, size_t bytes) {
  // The ticket: how many kIn tasks must be done, this copy's included.
  return copy(*in_, host, device, bytes) + 1;
}

void HostMemoryDevice::waitToHost(uint64_t ticket, Deadline deadline) {
  in_->waitFor(ticket, deadline);
}

void HostMemoryDevice::toDevice(void* device, const unsigned char* host, size_t bytes) {
  copy(*out_, device, host, bytes);
}

void HostMemoryDevice::copyOnDevice(Queue queue, const std::vector<cuda::CopySegment>& segments,
                                    const cuda::CopyConversion& conversion) {
  cuda::checkConversion(conversion);
  Worker& worker = queue == Queue::kIn ? *in_ : *out_;
  auto delay = options_.copy_delay;
  worker.push([segments, conversion, delay] {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    cuda::referenceBatchedCopy(segments, conversion);
  });
}

void HostMemoryDevice::zeroOnDevice(Queue queue, void* device, size_t bytes) {
  Worker& worker = queue == Queue::kIn ? *in_ : *out_;
  auto delay = options_.copy_delay;
  worker.push([device, bytes, delay] {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (bytes > 0) std::memset(device, 0, bytes);
  });
}

void HostMemoryDevice::synchronize(Queue queue, Deadline deadline) {
  (queue == Queue::kIn ? *in_ : *out_).waitAll(deadline);
}

void HostMemoryDevice::finish(uintptr_t stream, Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_.push_back(stream);
  }
  in_->waitAll(deadline);
  out_->waitAll(deadline);
}

void HostMemoryDevice::drain() noexcept {
  for (Worker* worker : {in_.get(), out_.get()}) {
    try {
      worker->waitAll(Deadline::after(std::chrono::seconds(30)));
    } catch (...) {
    }
    worker->clearError();  // a failed operation's error is not the next one's
  }
}

std::vector<uintptr_t> HostMemoryDevice::waitedStreams() {
  std::lock_guard<std::mutex> lock(mutex_);
  return waited_;
}

std::vector<uintptr_t> HostMemoryDevice::finishedStreams() {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

uint64_t HostMemoryDevice::copies() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<uint64_t>(copies_);
}

DeviceOpsFactory hostMemoryDevices(HostMemoryDeviceOptions options) {
  return [options](Device device) { return std::make_unique<HostMemoryDevice>(device, options); };
}

}  // namespace ronde::runtime
