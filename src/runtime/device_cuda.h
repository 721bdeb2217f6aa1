// The DeviceOps of one CUDA device (device_ops.h): two non-blocking streams (kIn for the
// device-to-host side, kOut for host-to-device), ready events recorded on the callers' streams,
// one pinned host buffer and one device fusion buffer kept and grown to need, and the batched
// copy kernels (src/cuda/batched_copy.h) for packing and unpacking. Every call selects the
// device for itself and restores the caller's current device. Builds with CUDA only.
#pragma once

#include <memory>

#include "runtime/device_ops.h"

namespace ronde::runtime {

// Error(kIo) naming the CUDA error when the device cannot be used (no driver, bad index).
std::unique_ptr<DeviceOps> makeCudaDeviceOps(Device device);

// How many CUDA devices this process sees; 0 where there is no driver or no GPU.
int visibleCudaDevices();

}  // namespace ronde::runtime
