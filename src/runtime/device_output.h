// Where a CUDA tensor's result goes, for both device paths (host staging in
// device_executor.cc, device communicators in device_comm_executor.cc).
#pragma once

#include <memory>
#include <vector>

#include "runtime/device_ops.h"
#include "runtime/local_request.h"

namespace ronde::runtime {

// The request's output, else the allocator's, else (when `in_place_default`) the input, else a
// new tensor on the input's device. Error(kInvalidArgument) naming the tensor when the output
// has another dtype, size or device than the result.
std::shared_ptr<Tensor> deviceOutput(DeviceOps& ops, LocalRequest& local,
                                     const std::vector<int64_t>& shape, bool in_place_default);

}  // namespace ronde::runtime
