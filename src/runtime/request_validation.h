// Checks a request on the calling thread, before it enters the runtime, and builds the
// descriptor this rank will announce for it. A bad request is Error(kInvalidArgument) at once.
#pragma once

#include <vector>

#include "runtime/descriptor.h"

namespace ronde::runtime {

// `members`: the world ranks of the request's process set; `rank`: this rank. On success the
// request's name moves into the descriptor (one string per request, not two); the runtime
// names the request by descriptor.name from then on.
Descriptor describeRequest(Request& request, const std::vector<int>& members, int rank);

}  // namespace ronde::runtime
