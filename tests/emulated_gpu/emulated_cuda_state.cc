#include "emulated_cuda_state.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <utility>

namespace ronde::emulated_gpu {
namespace {

// The streams of `device` (-1: of every device), the legacy ones with them.
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

// Whether a copy's kind agrees with where its memory is.
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

}  // namespace

int environmentInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

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

std::shared_ptr<Stream> resolve(cudaStream_t handle) {
  Emulator& e = emulator();
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
    return legacyStream(e, current_device);
  }
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.streams.find(handle);
  return it == e.streams.end() ? nullptr : it->second;
}

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
