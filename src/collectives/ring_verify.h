#pragma once

#include <string>

#include "collectives/collective_context.h"
#include "collectives/op_descriptor.h"

namespace ronde {

// Sends this rank's descriptor to the right neighbour and checks the left one's against it.
// If every neighbour pair agrees, all ranks agree; a rank that sees a difference throws
// Error(kMismatch), and the communicator's abort makes the others fail with that message.
void verifyAroundRing(const LinkGroup& group, const OpDescriptor& mine, const std::string& self_name,
                      const CollectiveContext& ctx);

}  // namespace ronde
