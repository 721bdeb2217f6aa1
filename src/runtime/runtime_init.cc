// Runtime::init: the two ways in, over a given communicator or from the environment.
#include "common/logging.h"
#include "runtime/runtime_impl.h"

namespace ronde {

std::unique_ptr<Runtime> Runtime::init(const Settings& settings,
                                       std::unique_ptr<Communicator> comm) {
  if (!comm) throw makeError(ErrorCode::kInvalidArgument, "Runtime::init needs a communicator");
  return std::make_unique<runtime::RuntimeImpl>(settings, std::move(comm));
}

std::unique_ptr<Runtime> Runtime::init(const Settings& settings, std::unique_ptr<Communicator> comm,
                                       const std::vector<std::vector<int>>& process_sets) {
  if (!comm) throw makeError(ErrorCode::kInvalidArgument, "Runtime::init needs a communicator");
  return std::make_unique<runtime::RuntimeImpl>(settings, std::move(comm), process_sets);
}

std::unique_ptr<Runtime> Runtime::init() {
  Settings settings = Settings::fromEnvironment();
  configureLogging(settings);
  auto comm = Communicator::fromEnvironment();
  setLogPrefix("[ronde rank " + std::to_string(comm->rank()) + "]");
  return init(settings, std::move(comm));
}

}  // namespace ronde
