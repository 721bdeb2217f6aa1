// Runs a runtime test body in N forked processes, each owning a Runtime initialised over its
// own Communicator (as a training program does). The body may shut the runtime down and
// build another over a new world (ctx.communicator with a fresh prefix) to test re-init.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "ronde/runtime.h"
#include "support/multiprocess.h"

namespace ronde::testing {

struct RuntimeContext {
  int rank = 0;
  int size = 0;
  RankSpec spec;
  std::shared_ptr<Store> store;
  // A communicator of `size` ranks meeting under `prefix` (use a new prefix per world).
  std::unique_ptr<Communicator> communicator(const std::string& prefix, int rank, int size) const;
};

using RuntimeBody = std::function<void(std::unique_ptr<Runtime>& runtime, RuntimeContext& ctx)>;

// Settings for tests: a short cycle, the stall inspector quiet.
Settings runtimeTestSettings();

// Initialises a runtime with `settings` over the world of spec.size ranks, runs `body`, then
// (if the body left a running runtime) meets the other ranks in a barrier and shuts it down.
// Adds a gtest failure per failed child.
void runRuntimeRanks(const RankSpec& spec, const Settings& settings, const RuntimeBody& body);

// Shorthand: a float32 host tensor of `n` elements holding `value` + i.
std::shared_ptr<HostTensor> filledFloats(size_t n, float value);

}  // namespace ronde::testing
