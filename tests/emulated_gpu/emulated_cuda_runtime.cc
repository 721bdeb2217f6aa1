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
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "emulated_cuda_state.h"

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
