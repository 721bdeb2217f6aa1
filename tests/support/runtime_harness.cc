#include "support/runtime_harness.h"

#include <gtest/gtest.h>

#include "ronde/store.h"

namespace ronde::testing {

std::unique_ptr<Communicator> RuntimeContext::communicator(const std::string& prefix, int r,
                                                           int n) const {
  return makeCommunicator(spec, r, n, std::make_shared<PrefixStore>(store, prefix));
}

Settings runtimeTestSettings() {
  Settings s;
  s.cycle_time_ms = 1.0;
  s.stall_check_disable = true;
  s.timeout_seconds = 60;
  return s;
}

void runRuntimeRanks(const RankSpec& spec, const Settings& settings, const RuntimeBody& body) {
  auto outcomes = runProcessesRaw(spec, [&](int rank, int port) {
    RuntimeContext ctx;
    ctx.rank = rank;
    ctx.size = spec.size;
    ctx.spec = spec;
    ctx.store = connectStore(spec, port);
    auto runtime = Runtime::init(settings, ctx.communicator("world", rank, spec.size));
    body(runtime, ctx);
    if (runtime && runtime->isInitialized()) {
      // One rank's shutdown stops every rank: meet first, so that a rank done early does not
      // cut short another's last requests.
      try {
        Request barrier;
        barrier.kind = RequestKind::kBarrier;
        barrier.name = "ronde.test.final_barrier";
        runtime->enqueue(barrier)->wait(std::chrono::seconds(60));
      } catch (const Error&) {
        // The runtime stopped meanwhile (a test of failures): nothing left to protect.
      }
    }
    if (runtime) runtime->shutdown();
  });
  for (const ChildOutcome& outcome : outcomes) {
    if (outcome.exit_code != 0) {
      ADD_FAILURE() << "rank " << outcome.rank << " of " << spec.size << " failed"
                    << (outcome.signal ? " with signal " + std::to_string(outcome.signal) : "")
                    << ": " << outcome.message;
    }
  }
}

std::shared_ptr<HostTensor> filledFloats(size_t n, float value) {
  auto t = std::make_shared<HostTensor>(DataType::kFloat32,
                                        std::vector<int64_t>{static_cast<int64_t>(n)});
  for (size_t i = 0; i < n; ++i) t->as<float>()[i] = value + static_cast<float>(i);
  return t;
}

}  // namespace ronde::testing
