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
  // When negotiation decided it: the start of its top-level timeline span (Horovod's ALLREDUCE,
  // ALLGATHER, ... around QUEUE, the copies and the collective).
  std::chrono::steady_clock::time_point decided;
};

}  // namespace ronde::runtime
