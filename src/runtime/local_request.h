// One request of this rank, from enqueue until its handle completes.
#pragma once

#include <chrono>
#include <memory>

#include "runtime/descriptor.h"
#include "runtime/device_ops.h"
#include "runtime/handle_impl.h"

namespace ronde::runtime {

struct LocalRequest {
  Request request;
  Descriptor descriptor;
  std::shared_ptr<HandleImpl> handle;
  std::chrono::steady_clock::time_point enqueued;
  int cache_slot = -1;  // >= 0: waiting on the cached path under this slot's bit
  std::shared_ptr<ReadyEvent> ready;  // CUDA inputs: recorded on request.stream at enqueue
};

}  // namespace ronde::runtime
