// The CUDA runtime calls of ronde and its GPU tests, on the host (emulated_gpu.h says why and
// what is checked). Semantics follow the CUDA runtime's documentation:
//   - a stream runs its work in order, on a thread of its own; cudaStreamWaitEvent orders a
//     stream after the work an event was recorded behind, as the device would;
//   - the legacy default stream (0) waits for the work of every blocking stream of its device,
//     and they for its (cudaStreamNonBlocking streams for neither);
//   - cudaMemcpyAsync between pinned and device memory is asynchronous; from pageable memory to
//     the device it takes the bytes before it returns, and they reach the device in stream
//     order; from the device to pageable memory it returns when the copy is done;
//   - cudaFree and cudaFreeHost wait for the device's work first;
//   - an event never recorded counts as complete; an event made with cudaEventDisableTiming
//     has no time.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emulated_gpu.h"

namespace ronde::emulated_gpu {
namespace {

using Clock = std::chrono::steady_clock;

int environmentInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

// One stream: work queued in order, run by a thread that holds the stream until it is destroyed
// and drained.
class Stream {
 public:
  Stream(int device, bool legacy, bool blocking)
      : device(device), legacy(legacy), blocking(blocking) {}

  static std::shared_ptr<Stream> start(int device, bool legacy, bool blocking) {
    auto stream = std::make_shared<Stream>(device, legacy, blocking);
    std::thread([stream] { stream->loop(); }).detach();
    return stream;
  }

  // The ticket that completes when `work` has run.
  uint64_t push(std::function<void()> work) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(work));
      ticket = ++enqueued_;
    }
    cv_.notify_all();
    return ticket;
  }
  void waitFor(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return completed_ >= ticket; });
  }
  bool done(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ >= ticket;
  }
  uint64_t last() {
    std::lock_guard<std::mutex> lock(mutex_);
    return enqueued_;
  }
  void drain() { waitFor(last()); }
  // The thread ends once the work queued so far has run.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
  }

  const int device;
  const bool legacy;
  const bool blocking;

 private:
  void loop() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++completed_;
      }
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
};

struct Event {
  explicit Event(unsigned flags) : flags(flags) {}
  const unsigned flags;
  std::mutex mutex;
  std::shared_ptr<Stream> stream;  // of the last record; null: never recorded
  uint64_t ticket = 0;
  Clock::time_point at{};  // when the recorded point was reached
};

constexpr size_t kDeviceMemory = size_t{16} << 30;  // each GPU's, as cudaMemGetInfo counts

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

Emulator& emulator() { return processWide<Emulator>(); }

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t error) {
  last_error = error;
  return error;
}

std::shared_ptr<Stream> legacyStream(Emulator& e, int device) {
  std::lock_guard<std::mutex> lock(e.mutex);
  auto& stream = e.legacy.at(static_cast<size_t>(device));
  if (!stream) stream = Stream::start(device, true, true);
  return stream;
}

// Null for a handle that is no stream. cudaStreamPerThread is taken as the legacy stream.
std::shared_ptr<Stream> resolve(cudaStream_t handle) {
  Emulator& e = emulator();
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
    return legacyStream(e, current_device);
  }
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.streams.find(handle);
  return it == e.streams.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Stream>> streamsOf(Emulator& e, int device) {
  std::lock_guard<std::mutex> lock(e.mutex);
  std::vector<std::shared_ptr<Stream>> all;
  for (auto& [handle, stream] : e.streams) {
    if (device < 0 || stream->device == device) all.push_back(stream);
  }
  for (auto& stream : e.legacy) {
    if (stream && (device < 0 || stream->device == device)) all.push_back(stream);
  }
  return all;
}

// Queues `work` with the legacy stream's implicit ordering against blocking streams.
uint64_t submit(Stream& stream, std::function<void()> work) {
  Emulator& e = emulator();
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> after;
  if (stream.legacy) {
    for (auto& other : streamsOf(e, stream.device)) {
      if (other.get() != &stream && other->blocking) after.emplace_back(other, other->last());
    }
  } else if (stream.blocking) {
    auto legacy = legacyStream(e, stream.device);
    after.emplace_back(legacy, legacy->last());
  }
  for (auto& [other, ticket] : after) {
    if (ticket > 0 && !other->done(ticket)) {
      stream.push([other = other, ticket = ticket] { other->waitFor(ticket); });
    }
  }
  return stream.push(std::move(work));
}

void delayed(const std::function<void()>& work) {
  const auto delay = emulator().delay;
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  work();
}

void synchronizeDevice(int device) {
  for (auto& stream : streamsOf(emulator(), device)) stream->drain();
}

cudaError_t checkCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const Region to = regionOf(dst, bytes);
  const Region from = regionOf(src, bytes);
  const bool to_device = to.kind == Region::Kind::kDevice;
  const bool from_device = from.kind == Region::Kind::kDevice;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = !to_device && !from_device;
      break;
    case cudaMemcpyHostToDevice:
      ok = to_device && !from_device;
      break;
    case cudaMemcpyDeviceToHost:
      ok = from_device && !to_device;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = to_device && from_device;
      break;
    case cudaMemcpyDefault:
      break;
  }
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                 cudaStream_t handle) {
  Emulator& e = emulator();
  if (e.sticky.load() != cudaSuccess) return fail(static_cast<cudaError_t>(e.sticky.load()));
  auto stream = resolve(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  if (cudaError_t status = checkCopy(dst, src, bytes, kind); status != cudaSuccess) {
    return fail(status);
  }
  const Region to = regionOf(dst, bytes);
  const Region from = regionOf(src, bytes);
  if (to.kind == Region::Kind::kDevice && from.kind == Region::Kind::kPageable) {
    // Staged: the bytes are taken now (the caller may reuse its buffer at once) and reach the
    // device in stream order.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    submit(*stream, [dst, staged] {
      delayed([&] { std::memcpy(dst, staged->data(), staged->size()); });
    });
    return cudaSuccess;
  }
  const uint64_t ticket =
      submit(*stream, [=] { delayed([&] { std::memmove(dst, src, bytes); }); });
  if (to.kind == Region::Kind::kPageable && from.kind == Region::Kind::kDevice) {
    stream->waitFor(ticket);
  }
  return cudaSuccess;
}

cudaError_t fill(void* dst, int value, size_t bytes, cudaStream_t handle, bool wait) {
  auto stream = resolve(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  if (regionOf(dst, bytes).kind != Region::Kind::kDevice) return fail(cudaErrorInvalidValue);
  const uint64_t ticket =
      submit(*stream, [=] { delayed([&] { std::memset(dst, value, bytes); }); });
  if (wait) stream->waitFor(ticket);
  return cudaSuccess;
}

cudaError_t allocate(void** p, size_t bytes, Region::Kind kind) {
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* memory = std::aligned_alloc(256, rounded);
  if (memory == nullptr) return fail(cudaErrorMemoryAllocation);
  // Device memory is not zeroed: a read before the first write sees this, not zeros.
  if (kind == Region::Kind::kDevice) std::memset(memory, 0xA5, rounded);
  Emulator& e = emulator();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    e.allocations[reinterpret_cast<uintptr_t>(memory)] = {bytes, kind, current_device};
  }
  *p = memory;
  return cudaSuccess;
}

cudaError_t release(void* p, Region::Kind kind) {
  if (p == nullptr) return cudaSuccess;
  Emulator& e = emulator();
  int device;
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    auto it = e.allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == e.allocations.end() || it->second.kind != kind) return fail(cudaErrorInvalidValue);
    device = it->second.device;
  }
  synchronizeDevice(kind == Region::Kind::kDevice ? device : -1);
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    e.allocations.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}

std::shared_ptr<Event> findEvent(cudaEvent_t handle) {
  Emulator& e = emulator();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.events.find(handle);
  return it == e.events.end() ? nullptr : it->second;
}

bool validDevice(int device) { return device >= 0 && device < emulator().devices; }

}  // namespace

Region regionOf(const void* p, size_t bytes) {
  Emulator& e = emulator();
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.allocations.upper_bound(at);
  if (it == e.allocations.begin()) return {};
  --it;
  const uintptr_t end = it->first + it->second.bytes;
  if (at >= end) return {};
  if (at + bytes > end) return {Region::Kind::kPageable, -1};  // runs past its allocation
  return {it->second.kind, it->second.kind == Region::Kind::kDevice ? it->second.device : -1};
}

cudaError_t enqueue(cudaStream_t handle, std::function<void()> work) {
  Emulator& e = emulator();
  if (e.sticky.load() != cudaSuccess) return fail(static_cast<cudaError_t>(e.sticky.load()));
  auto stream = resolve(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  submit(*stream, [work = std::move(work)] {
    try {
      delayed(work);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "emulated GPU: work on a stream failed: %s\n", error.what());
      emulator().sticky.store(cudaErrorLaunchFailure);
    }
  });
  return cudaSuccess;
}

int deviceOf(cudaStream_t handle) {
  auto stream = resolve(handle);
  return stream ? stream->device : -1;
}

int currentDevice() { return current_device; }

}  // namespace ronde::emulated_gpu

using namespace ronde::emulated_gpu;  // NOLINT: the C API below is global, as CUDA's

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = emulator().devices;
  return emulator().devices > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (!validDevice(device)) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (bus_id == nullptr || length <= 0) return fail(cudaErrorInvalidValue);
  if (!validDevice(device)) return fail(cudaErrorInvalidDevice);
  std::snprintf(bus_id, static_cast<size_t>(length), "00000000:%02X:00.0", 0x18 + device);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (properties == nullptr) return fail(cudaErrorInvalidValue);
  if (!validDevice(device)) return fail(cudaErrorInvalidDevice);
  std::memset(properties, 0, sizeof(*properties));
  std::snprintf(properties->name, sizeof(properties->name), "ronde emulated GPU %d", device);
  properties->totalGlobalMem = kDeviceMemory;
  properties->major = 9;
  properties->minor = 0;
  properties->multiProcessorCount = 1;
  properties->warpSize = 32;
  properties->maxThreadsPerBlock = 1024;
  properties->pciBusID = 0x18 + device;
  return cudaSuccess;
}

// Free is what this process has not allocated on the current device (a real GPU's other
// processes and the driver's own use are not emulated).
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return fail(cudaErrorInvalidValue);
  Emulator& e = emulator();
  size_t used = 0;
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    for (const auto& [start, allocation] : e.allocations) {
      if (allocation.kind == Region::Kind::kDevice && allocation.device == current_device)
        used += (allocation.bytes + 255) / 256 * 256;
    }
  }
  *total = kDeviceMemory;
  *free = used < kDeviceMemory ? kDeviceMemory - used : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  synchronizeDevice(current_device);
  return static_cast<cudaError_t>(emulator().sticky.load());
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error != cudaSuccess ? error : static_cast<cudaError_t>(emulator().sticky.load());
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    default: return "unknown error";
  }
}

cudaError_t cudaMalloc(void** p, size_t bytes) { return allocate(p, bytes, Region::Kind::kDevice); }
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return allocate(p, bytes, Region::Kind::kPinned);
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  return allocate(p, bytes, Region::Kind::kPinned);
}
cudaError_t cudaFree(void* p) { return release(p, Region::Kind::kDevice); }
cudaError_t cudaFreeHost(void* p) { return release(p, Region::Kind::kPinned); }

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  if (attributes == nullptr) return fail(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof(*attributes));
  const Region region = regionOf(p, 1);
  switch (region.kind) {
    case Region::Kind::kDevice:
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = region.device;
      attributes->devicePointer = const_cast<void*>(p);
      break;
    case Region::Kind::kPinned:
      attributes->type = cudaMemoryTypeHost;
      attributes->devicePointer = const_cast<void*>(p);
      attributes->hostPointer = const_cast<void*>(p);
      break;
    case Region::Kind::kPageable:
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = -2;
      break;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t status = copy(dst, src, bytes, kind, nullptr); status != cudaSuccess) {
    return status;
  }
  legacyStream(emulator(), current_device)->drain();
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  return fill(dst, value, bytes, stream, false);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  return fill(dst, value, bytes, nullptr, true);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* handle, unsigned int flags) {
  if (handle == nullptr) return fail(cudaErrorInvalidValue);
  auto stream = Stream::start(current_device, false, (flags & cudaStreamNonBlocking) == 0);
  Emulator& e = emulator();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.streams[stream.get()] = stream;
  *handle = reinterpret_cast<cudaStream_t>(stream.get());
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* handle) {
  return cudaStreamCreateWithFlags(handle, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  Emulator& e = emulator();
  std::shared_ptr<Stream> stream;
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    auto it = e.streams.find(handle);
    if (it == e.streams.end()) return fail(cudaErrorInvalidResourceHandle);
    stream = it->second;
    e.streams.erase(it);
  }
  stream->stop();  // its queued work still runs, as on a GPU
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  auto stream = resolve(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (emulator().sticky.load() != cudaSuccess) return fail(cudaErrorLaunchFailure);
  return stream->done(stream->last()) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  auto stream = resolve(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  stream->drain();
  return static_cast<cudaError_t>(emulator().sticky.load());
}

cudaError_t cudaLaunchHostFunc(cudaStream_t handle, cudaHostFn_t fn, void* data) {
  auto stream = resolve(handle);
  if (!stream || fn == nullptr) return fail(cudaErrorInvalidResourceHandle);
  submit(*stream, [fn, data] { fn(data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* handle, unsigned int flags) {
  if (handle == nullptr) return fail(cudaErrorInvalidValue);
  auto event = std::make_shared<Event>(flags);
  Emulator& e = emulator();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.events[event.get()] = event;
  *handle = reinterpret_cast<cudaEvent_t>(event.get());
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* handle) {
  return cudaEventCreateWithFlags(handle, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t handle) {
  Emulator& e = emulator();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.events.erase(handle) == 1 ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t stream_handle) {
  auto event = findEvent(handle);
  auto stream = resolve(stream_handle);
  if (!event || !stream) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(event->mutex);
  // The record itself runs on the stream: it notes when the point was reached, if this is
  // still the event's latest record.
  auto generation = std::make_shared<uint64_t>(0);
  const uint64_t ticket = submit(*stream, [event, stream, generation] {
    std::lock_guard<std::mutex> lock(event->mutex);
    if (event->stream == stream && event->ticket == *generation) event->at = Clock::now();
  });
  *generation = ticket;  // before the record can run: the event's mutex is held
  event->stream = stream;
  event->ticket = ticket;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t handle) {
  auto event = findEvent(handle);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(event->mutex);
  if (!event->stream || event->stream->done(event->ticket)) return cudaSuccess;
  return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t handle) {
  auto event = findEvent(handle);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> stream;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    stream = event->stream;
    ticket = event->ticket;
  }
  if (stream) stream->waitFor(ticket);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start_handle, cudaEvent_t end_handle) {
  auto start = findEvent(start_handle);
  auto end = findEvent(end_handle);
  if (ms == nullptr || !start || !end) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (cudaEventQuery(start_handle) != cudaSuccess || cudaEventQuery(end_handle) != cudaSuccess) {
    return fail(cudaErrorNotReady);
  }
  std::scoped_lock lock(start->mutex, end->mutex);
  if (!start->stream || !end->stream) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream_handle, cudaEvent_t handle, unsigned int) {
  auto event = findEvent(handle);
  auto stream = resolve(stream_handle);
  if (!event || !stream) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> other;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    other = event->stream;
    ticket = event->ticket;
  }
  if (other && other != stream) submit(*stream, [other, ticket] { other->waitFor(ticket); });
  return cudaSuccess;
}

}  // extern "C"
