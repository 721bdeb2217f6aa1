// Communicator::fromEnvironment for workers of an elastic job (RONDE_ELASTIC=1).
#pragma once

#include <memory>

#include "ronde/communicator.h"
#include "ronde/settings.h"

namespace ronde {

// Waits for the driver's next generation that includes this worker, then meets its peers.
std::unique_ptr<Communicator> elasticCommunicator(const Settings& settings);

}  // namespace ronde
