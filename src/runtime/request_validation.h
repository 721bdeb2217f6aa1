// Checks a request on the calling thread, before it enters the runtime, and builds the
// descriptor this rank will announce for it. A bad request is Error(kInvalidArgument) at once.
#pragma once

#include <vector>

#include "runtime/descriptor.h"

namespace ronde::runtime {

// `members`: the world ranks of the request's process set; `rank`: this rank.
Descriptor describeRequest(const Request& request, const std::vector<int>& members, int rank);

}  // namespace ronde::runtime
