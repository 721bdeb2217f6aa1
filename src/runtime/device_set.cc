#include "runtime/device_set.h"

#include "ronde/errors.h"

#if defined(RONDE_HAVE_CUDA)
#include "runtime/device_cuda.h"
#endif

namespace ronde::runtime {

DeviceSet::DeviceSet(DeviceOpsFactory factory)
    : factory_(factory ? std::move(factory) : defaultDeviceOpsFactory()) {}

DeviceOps& DeviceSet::ops(Device device) {
  if (device.kind != Device::Kind::kCuda || device.index < 0) {
    throw makeError(ErrorCode::kInvalidArgument, "no device operations for a ",
                    device.kind == Device::Kind::kCpu ? "host" : "CUDA", " tensor of device index ",
                    device.index);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ops_.find(device.index);
  if (it == ops_.end()) it = ops_.emplace(device.index, factory_(device)).first;
  return *it->second;
}

Device DeviceSet::fallbackDevice(int local_rank) {
  int count = 0;
#if defined(RONDE_HAVE_CUDA)
  count = visibleCudaDevices();
#endif
  return {Device::Kind::kCuda, count > 0 ? local_rank % count : local_rank};
}

DeviceOpsFactory defaultDeviceOpsFactory() {
#if defined(RONDE_HAVE_CUDA)
  return [](Device device) { return makeCudaDeviceOps(device); };
#else
  return [](Device device) -> std::unique_ptr<DeviceOps> {
    throw makeError(ErrorCode::kInvalidArgument, "cuda:", device.index,
                    " tensor: ronde was built without CUDA (build it where nvcc is on PATH, "
                    "see docs/gpu.md)");
  };
#endif
}

}  // namespace ronde::runtime
