// The host-memory stand-in device of the staging tests, with every copy slowed: a missing
// wait on a copy then reads stale bytes instead of passing by luck.
#pragma once

#include <chrono>

#include "runtime/device_host_memory.h"

namespace ronde::testing {

inline runtime::HostMemoryDeviceOptions slowCopies() {
  runtime::HostMemoryDeviceOptions options;
  options.copy_delay = std::chrono::microseconds(300);
  return options;
}

}  // namespace ronde::testing
