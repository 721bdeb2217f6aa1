// Stalls and deaths: a stalled request is reported naming the ranks it waits on, the stall
// inspector can shut the runtime down, and a dead rank fails every pending handle everywhere.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

Request allreduceOf(const std::string& name, std::shared_ptr<Tensor> t) {
  Request r;
  r.name = name;
  r.input = r.output = t;
  return r;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RuntimeFaults, StalledRequestIsReportedWithTheMissingRanks) {
  RankSpec spec;
  spec.size = 3;
  Settings settings = runtimeTestSettings();
  settings.stall_check_disable = false;
  settings.stall_check_seconds = 0.3;
  std::string log_path = "/tmp/ronde-stall-" + std::to_string(::getpid()) + ".log";
  runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    if (ctx.rank == 0) {
      FILE* f = std::fopen(log_path.c_str(), "w");
      ::dup2(fileno(f), 2);
    }
    auto t = filledFloats(4, 1.0f);
    // The stall check also has to see requests waiting on the cached path: cache it first.
    rt->enqueue(allreduceOf("lonely", t))->wait();
    std::shared_ptr<Handle> h;
    if (ctx.rank == 1) h = rt->enqueue(allreduceOf("lonely", t));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (ctx.rank != 1) h = rt->enqueue(allreduceOf("lonely", t));
    h->wait(std::chrono::seconds(30));
    if (ctx.rank == 0) {
      std::fflush(stderr);
      std::string log = readFile(log_path);
      REQUIRE(log.find("stall") != std::string::npos, "no stall report in: " << log);
      REQUIRE(log.find("'lonely'") != std::string::npos, "the report names the tensor: " << log);
      REQUIRE(log.find("submitted by rank 1 (host") != std::string::npos,
              "names who submitted: " << log);
      REQUIRE(log.find("missing on rank 0 (host") != std::string::npos &&
                  log.find("rank 2 (host") != std::string::npos,
              "names the missing ranks: " << log);
      std::remove(log_path.c_str());
    }
  });
}

TEST(RuntimeFaults, StallShutdownStopsEveryRank) {
  RankSpec spec;
  spec.size = 2;
  Settings settings = runtimeTestSettings();
  settings.stall_check_disable = false;
  settings.stall_check_seconds = 0.2;
  settings.stall_shutdown_seconds = 0.5;
  runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    ::freopen("/dev/null", "w", stderr);
    if (ctx.rank == 1) {
      auto h = rt->enqueue(allreduceOf("stuck", filledFloats(4, 1.0f)));
      bool aborted = false;
      try {
        h->wait(std::chrono::seconds(30));
      } catch (const Error& e) {
        aborted = e.code() == ErrorCode::kAborted &&
                  std::string(e.what()).find("stall") != std::string::npos;
      }
      REQUIRE(aborted, "the stuck request fails with the stall shutdown");
    }
    for (int i = 0; i < 3000 && rt->isInitialized(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(!rt->isInitialized(), "rank " << ctx.rank << " stopped by the stall shutdown");
  });
}

TEST(RuntimeFaults, DeadRankFailsPendingHandlesEverywhere) {
  RankSpec spec;
  spec.size = 3;
  spec.collective_timeout_ms = 20000;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        ::freopen("/dev/null", "w", stderr);
        auto t = filledFloats(1000, 1.0f);
        rt->enqueue(allreduceOf("warm", t))->wait();
        if (ctx.rank == 2) ::_exit(0);  // dies without a word, its runtime mid-cycle
        // One request all live ranks submit, one nobody else does: both must fail. (If the death
        // is noticed first, enqueue itself refuses with the same error.)
        std::vector<std::string> names = {"warm", "only-mine-" + std::to_string(ctx.rank)};
        for (const std::string& name : names) {
          bool failed = false;
          try {
            rt->enqueue(allreduceOf(name, filledFloats(1000, 1.0f)))
                ->wait(std::chrono::seconds(40));
          } catch (const Error& e) {
            failed = (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kAborted) &&
                     std::string(e.what()).find("rank 2") != std::string::npos;
            if (!failed) throw;
          }
          REQUIRE(failed, "the pending handle fails naming rank 2");
        }
        REQUIRE(!rt->isInitialized(), "the runtime is stopped");
        bool refused = false;
        try {
          rt->enqueue(allreduceOf("later", t));
        } catch (const Error&) {
          refused = true;
        }
        REQUIRE(refused, "later requests are refused");
        rt->shutdown();  // and it still shuts down
      });
}

TEST(RuntimeFaults, IdleRuntimeCostsLittleCpu) {
  RankSpec spec;
  spec.size = 2;
  runRuntimeRanks(
      spec, runtimeTestSettings(), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        rt->enqueue(allreduceOf("warm", filledFloats(4, 1.0f)))->wait();
        rusage before{}, after{};
        ::getrusage(RUSAGE_SELF, &before);
        auto start = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::chrono::seconds(1));
        ::getrusage(RUSAGE_SELF, &after);
        double wall =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        auto seconds = [](const timeval& tv) {
          return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
        };
        double cpu = seconds(after.ru_utime) - seconds(before.ru_utime) + seconds(after.ru_stime) -
                     seconds(before.ru_stime);
        std::fprintf(stdout, "rank %d idle runtime (1 ms cycle): %.1f%% of one core\n", ctx.rank,
                     100 * cpu / wall);
        std::fflush(stdout);
        REQUIRE(cpu / wall < 0.15, "idle runtime used " << 100 * cpu / wall << "% of a core");
      });
}

}  // namespace
}  // namespace ronde::testing
