// The DeviceOps of every device this process has used, made on first use by a factory: CUDA's
// in a build with CUDA (device_cuda.h), else one that refuses CUDA tensors with an error that
// says why. Tests give a factory of host-memory devices (device_host_memory.h).
//
// Threads: ops() may be called from any thread (enqueue records ready events on the callers'
// threads); the DeviceOps it returns lives as long as the set.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "runtime/device_ops.h"

namespace ronde::runtime {

class DeviceSet {
 public:
  // `factory` empty: this build's default.
  explicit DeviceSet(DeviceOpsFactory factory);
  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;

  // Error(kInvalidArgument) when this build cannot use `device`.
  DeviceOps& ops(Device device);
  // The GPU a rank uses when it has no tensor to say which (a joined rank taking part in a
  // device communicator's first collective): its local rank among the visible devices, as
  // launchers pin one GPU per local rank.
  static Device fallbackDevice(int local_rank);

 private:
  DeviceOpsFactory factory_;
  std::mutex mutex_;
  std::map<int, std::unique_ptr<DeviceOps>> ops_;  // by CUDA device index; guarded by mutex_
};

// The factory of this build: CUDA devices with CUDA, else an error naming the missing build.
DeviceOpsFactory defaultDeviceOpsFactory();

}  // namespace ronde::runtime
