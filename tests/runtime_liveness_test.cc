// Liveness and stalls while the background thread is stuck: a stopped (SIGSTOP) rank fails
// every other rank's pending handle with kPeerLost naming it and its host, long before the
// collective timeout, whether that rank watches it or learns it from the failure record; a
// round's store requests do not grow with the job; a slow but running rank is not flagged;
// and the stall inspector still reports from its own thread while the background thread is
// blocked in a collective.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "comm/failure_record.h"
#include "runtime/liveness_monitor.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"
#include "support/stopped_rank_checks.h"

namespace ronde::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Segments named after `pid` (the local rank 0 that created its host's arena).
bool shmLeftBy(pid_t pid) {
  std::string prefix = "ronde-" + std::to_string(pid) + "-";
  bool found = false;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir))
      found |= std::string(entry->d_name).rfind(prefix, 0) == 0;
    ::closedir(dir);
  }
  return found;
}

Settings livenessSettings(double timeout_seconds) {
  Settings s = runtimeTestSettings();
  s.liveness_timeout_seconds = timeout_seconds;
  return s;
}

// Like runRuntimeRanks, but returns the outcomes: the stopped rank ends killed by SIGKILL.
std::vector<ChildOutcome> runJob(const RankSpec& spec, const Settings& settings,
                                 const RuntimeBody& body) {
  return runProcessesRaw(spec, [&](int rank, int port) {
    RuntimeContext ctx;
    ctx.rank = rank;
    ctx.size = spec.size;
    ctx.spec = spec;
    ctx.store = connectStore(spec, port);
    auto runtime = Runtime::init(settings, ctx.communicator("world", rank, spec.size));
    body(runtime, ctx);
    if (runtime) runtime->shutdown();
  });
}

void publishPid(RuntimeContext& ctx) {
  ctx.store->setString("test/pid/" + std::to_string(ctx.rank), std::to_string(::getpid()));
}

pid_t pidOf(RuntimeContext& ctx, int rank) {
  return static_cast<pid_t>(std::stol(
      ctx.store->getString("test/pid/" + std::to_string(rank), std::chrono::seconds(20))));
}

// Allreduce after allreduce of `big` until one fails: `victim` loops until it is stopped (and
// later killed, so it never returns), `stopper` sends it SIGSTOP at its third step. Returns
// the failed handle and its message; fails the rank if none failed.
std::pair<std::shared_ptr<Handle>, std::string> stepUntilOneFails(
    Runtime& rt, RuntimeContext& ctx, const std::shared_ptr<HostTensor>& big, int victim,
    int stopper) {
  if (ctx.rank == victim) {
    for (int i = 0;; ++i) rt.enqueue(allreduceOf("step" + std::to_string(i), big))->wait();
  }
  const pid_t pid = pidOf(ctx, victim);
  for (int i = 0; i < 1000; ++i) {
    auto step = rt.enqueue(allreduceOf("step" + std::to_string(i), big));
    if (ctx.rank == stopper && i == 2) ::kill(pid, SIGSTOP);
    try {
      step->wait(std::chrono::seconds(8));
    } catch (const Error& e) {
      return {step, e.what()};
    }
  }
  REQUIRE(false, "every allreduce succeeded while rank " << victim << " was stopped");
  return {};
}

// Counts the requests that reach each key, and forwards them.
class CountingStore final : public Store {
 public:
  explicit CountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void set(const std::string& key, const Bytes& value) override {
    count(key);
    inner_->set(key, value);
  }
  Bytes get(const std::string& key, Duration timeout) override {
    count(key);
    return inner_->get(key, timeout);
  }
  bool tryGet(const std::string& key, Bytes* value) override {
    count(key);
    return inner_->tryGet(key, value);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    count(key);
    return inner_->add(key, delta);
  }
  void erase(const std::string& key) override {
    count(key);
    inner_->erase(key);
  }
  std::map<std::string, int> counts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return counts_;
  }

 private:
  void count(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_[key];
  }
  std::shared_ptr<Store> inner_;
  std::mutex mutex_;
  std::map<std::string, int> counts_;
};

TEST(LivenessMonitor, ReportsOnlyThePeerThatStopsBeating) {
  auto store = makeMemoryStore();
  std::atomic<int> reports{0};
  std::atomic<int> silent_rank{-1};
  std::atomic<double> silent_for{0};
  auto on_silent = [&](int rank, double seconds, const std::function<void()>&) {
    silent_rank = rank;
    silent_for = seconds;
    ++reports;
  };
  auto never = [&](int, double, const std::function<void()>&) { ++reports; };
  auto no_failure = [&](const Error&) { ++reports; };
  runtime::LivenessMonitor zero(store, 0, 3, 1.0, on_silent, no_failure);
  runtime::LivenessMonitor one(store, 1, 3, 1.0, never, no_failure);
  auto two = std::make_unique<runtime::LivenessMonitor>(store, 2, 3, 1.0, never, no_failure);
  // All three beat for several timeouts: nobody is reported.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(reports.load(), 0);
  two.reset();  // rank 2 goes silent (as a stopped process's thread does)
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (reports.load() < 2 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Ranks 0 and 1 each report rank 2, once, silent for at least the timeout.
  EXPECT_EQ(reports.load(), 2);
  EXPECT_EQ(silent_rank.load(), 2);
  EXPECT_GE(silent_for.load(), 1.0);
}

// Eight ranks: rank 5's two watchers (3 and 4) report it; the watchers' report, published as
// the job's first failure the way the runtime's abort does, reaches the other five through
// their next rounds. No monitor reads more than its own beat, its two successors' counters
// and the failure record, however large the job.
TEST(LivenessMonitor, TwoWatchersPerRankAndTheRestLearnFromTheFailureRecord) {
  constexpr int kSize = 8;
  constexpr int kSilent = 5;
  auto inner = makeMemoryStore();
  std::mutex mutex;
  std::map<int, int> silent_seen;      // reporting rank -> the rank it found silent
  std::map<int, std::string> failure;  // rank -> the failure it learned of
  std::vector<std::shared_ptr<CountingStore>> stores;
  std::vector<std::unique_ptr<runtime::LivenessMonitor>> monitors;
  for (int r = 0; r < kSize; ++r) {
    stores.push_back(std::make_shared<CountingStore>(inner));
    auto on_silent = [&, r](int rank, double, const std::function<void()>&) {
      std::lock_guard<std::mutex> lock(mutex);
      silent_seen[r] = rank;
      publishFirstFailure(*inner, ErrorCode::kPeerLost, "rank " + std::to_string(rank) +
                                                             " silent, seen by " +
                                                             std::to_string(r));
    };
    auto on_failed = [&, r](const Error& e) {
      std::lock_guard<std::mutex> lock(mutex);
      failure[r] = std::string(errorCodeName(e.code())) + ": " + e.what();
    };
    monitors.push_back(
        std::make_unique<runtime::LivenessMonitor>(stores.back(), r, kSize, 1.0, on_silent,
                                                   on_failed));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_TRUE(silent_seen.empty() && failure.empty()) << "a report while all beat";
  }
  monitors[kSilent].reset();
  auto done = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    return silent_seen.size() + failure.size() >= kSize - 1;
  };
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (auto& m : monitors) m.reset();

  // Both watchers may find rank 5 silent (or one learns of it from the other's report first);
  // nobody else judges it, and every rank but 5 ends knowing.
  for (const auto& [r, rank] : silent_seen) {
    EXPECT_TRUE(r == 3 || r == 4) << "rank " << r << " does not watch rank 5";
    EXPECT_EQ(rank, kSilent);
  }
  EXPECT_FALSE(silent_seen.empty()) << "no watcher reported rank 5";
  for (int r = 0; r < kSize; ++r) {
    if (r == kSilent) continue;
    const bool knows = silent_seen.count(r) > 0 ||
                       failure[r].find("PeerLost: rank 5 silent, seen by") == 0;
    EXPECT_TRUE(knows) << "rank " << r << " learned nothing (failure: '" << failure[r] << "')";
  }
  for (int r = 0; r < kSize; ++r) {
    std::set<std::string> expected{runtime::LivenessMonitor::key(r), "abort/reason"};
    for (int w : runtime::LivenessMonitor::watchedBy(r, kSize))
      expected.insert(runtime::LivenessMonitor::key(w));
    EXPECT_EQ(expected.size(), 4u);
    // A watcher that finds rank 5 silent records it once, for the elastic driver.
    if (silent_seen.count(r) > 0) expected.insert(runtime::LivenessMonitor::silentKey(kSilent));
    for (const auto& [key, n] : stores[static_cast<size_t>(r)]->counts())
      EXPECT_TRUE(expected.count(key)) << "rank " << r << " read " << key << " " << n << " times";
  }
  // The structured finding: which rank is silent, and a watcher that found it.
  Bytes reporter;
  ASSERT_TRUE(inner->tryGet(runtime::LivenessMonitor::silentKey(kSilent), &reporter));
  const int by = std::stoi(std::string(reporter.begin(), reporter.end()));
  EXPECT_TRUE(silent_seen.count(by) > 0) << "recorded by rank " << by;
  for (int r = 0; r < kSize; ++r) {
    if (r == kSilent) continue;
    EXPECT_FALSE(inner->tryGet(runtime::LivenessMonitor::silentKey(r), &reporter)) << r;
  }
  EXPECT_EQ(runtime::LivenessMonitor::watchedBy(4, kSize), (std::vector<int>{5, 6}));
  EXPECT_EQ(runtime::LivenessMonitor::watchedBy(7, kSize), (std::vector<int>{0, 1}));
  EXPECT_EQ(runtime::LivenessMonitor::watchedBy(1, 2), (std::vector<int>{0}));
}

TEST(RuntimeLiveness, StoppedRankFailsThePeerWithPeerLostTwoRanks) {
  RankSpec spec;
  spec.size = 2;
  spec.timeout_seconds = 30;  // a failure here would otherwise hang until the harness kills it
  spec.collective_timeout_ms = 60000;
  const std::string host = thisHost();
  auto outcomes =
      runJob(spec, livenessSettings(2), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        ::freopen("/dev/null", "w", stderr);
        publishPid(ctx);
        rt->enqueue(allreduceOf("warm", filledFloats(1000, 1.0f)))->wait();
        // 16 MiB: the stop lands inside the collective (or its negotiation), not between steps.
        auto step = rt->enqueue(allreduceOf("step", filledFloats(4 << 20, 1.0f)));
        if (ctx.rank == 1) {
          ::raise(SIGSTOP);  // wedged: every thread of this process stops, its heartbeat too
          return;            // never reached: rank 0 kills it
        }
        requirePeerLost(*step, 1, host);
        REQUIRE(!rt->isInitialized(), "the runtime stopped");
        pid_t stopped = pidOf(ctx, 1);
        REQUIRE(isStopped(stopped), "rank 1 is still stopped, not dead");
        ::kill(stopped, SIGKILL);
        rt->shutdown();  // does not hang on the dead peer
        REQUIRE(!shmLeftBy(::getpid()), "no shared memory is left in /dev/shm");
      });
  expectKilledAndOthersPassed(outcomes, 1);
}

TEST(RuntimeLiveness, StoppedRankFailsEveryPeerWithPeerLostThreeRanksTwoHosts) {
  RankSpec spec;
  spec.size = 3;
  spec.hosts = {"hostA", "hostA", "hostB"};  // ranks 0, 1 share memory; rank 2 over TCP
  spec.timeout_seconds = 30;
  spec.collective_timeout_ms = 60000;
  auto outcomes =
      runJob(spec, livenessSettings(2), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        ::freopen("/dev/null", "w", stderr);
        publishPid(ctx);
        rt->enqueue(allreduceOf("warm", filledFloats(1000, 1.0f)))->wait();
        // Rank 0 (which created hostA's shared memory) is stopped from outside while the ranks
        // run one large allreduce after another, so it stops inside one of them. (A single
        // allreduce may finish before the signal lands, now that a cycle starts at once.)
        auto [failed, what] = stepUntilOneFails(*rt, ctx, filledFloats(4 << 20, 1.0f), 0, 2);
        pid_t victim = pidOf(ctx, 0);
        requirePeerLost(*failed, 0, "hostA");
        REQUIRE(!rt->isInitialized(), "the runtime stopped");
        if (ctx.rank == 2) {
          REQUIRE(isStopped(victim), "rank 0 is still stopped, not dead");
          ctx.store->get("test/rank1_saw_it", std::chrono::seconds(20));
          ::kill(victim, SIGKILL);
          for (int i = 0; i < 500 && isStopped(victim); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          ctx.store->setString("test/killed", "1");
        } else {
          ctx.store->setString("test/rank1_saw_it", "1");
          ctx.store->get("test/killed", std::chrono::seconds(20));
          // The segment's name went with the mapping of every rank: nothing is left behind.
          REQUIRE(!shmLeftBy(victim), "no shared memory of rank 0 is left in /dev/shm");
        }
        rt->shutdown();
      });
  expectKilledAndOthersPassed(outcomes, 0);
}

// Five ranks, each on a host of its own (a TCP ring): rank 2 is stopped inside an allreduce.
// Only ranks 0 and 1 watch it; ranks 3 and 4 learn from the failure record. Rank 3 receives
// from rank 2 in the ring, so its link would say nothing before the 60 s collective timeout.
TEST(RuntimeLiveness, RanksThatDoNotWatchTheStoppedOneFailNamingItToo) {
  RankSpec spec;
  spec.size = 5;
  spec.hosts = {"hostA", "hostB", "hostC", "hostD", "hostE"};
  spec.timeout_seconds = 40;
  spec.collective_timeout_ms = 60000;
  constexpr int kStopped = 2;
  auto outcomes =
      runJob(spec, livenessSettings(2), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        ::freopen("/dev/null", "w", stderr);
        publishPid(ctx);
        rt->enqueue(allreduceOf("warm", filledFloats(1000, 1.0f)))->wait();
        auto [failed, what] =
            stepUntilOneFails(*rt, ctx, filledFloats(1 << 20, 1.0f), kStopped, 0);
        pid_t victim = pidOf(ctx, kStopped);
        requirePeerLost(*failed, kStopped, "hostC");
        REQUIRE(what.find("noticed by rank 0") != std::string::npos ||
                    what.find("noticed by rank 1") != std::string::npos,
                "a watcher of rank 2 noticed: " << what);
        REQUIRE(!rt->isInitialized(), "the runtime stopped");
        ctx.store->setString("test/saw/" + std::to_string(ctx.rank), "1");
        if (ctx.rank == 0) {
          for (int r : {1, 3, 4}) ctx.store->get("test/saw/" + std::to_string(r),
                                                 std::chrono::seconds(20));
          REQUIRE(isStopped(victim), "rank 2 is still stopped, not dead");
          ::kill(victim, SIGKILL);
        }
        rt->shutdown();
      });
  expectKilledAndOthersPassed(outcomes, kStopped);
}

TEST(RuntimeLiveness, SlowButRunningRankIsNotFlagged) {
  RankSpec spec;
  spec.size = 2;
  spec.timeout_seconds = 30;
  runRuntimeRanks(spec, livenessSettings(2),
                  [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
                    auto t = filledFloats(1000, 1.0f);
                    rt->enqueue(allreduceOf("warm", t))->wait();
                    // Rank 1 "computes" for longer than the liveness timeout before it submits;
                    // rank 0 waits meanwhile. Its heartbeat thread runs, so nobody is lost.
                    if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
                    auto x = filledFloats(8, 1.0f);
                    rt->enqueue(allreduceOf("late", x))->wait(std::chrono::seconds(30));
                    for (int i = 0; i < 8; ++i) {
                      REQUIRE(x->as<float>()[i] == 2.0f * (1.0f + static_cast<float>(i)),
                              "element " << i << " is " << x->as<float>()[i]);
                    }
                    REQUIRE(rt->isInitialized(), "the runtime still runs");
                  });
}

TEST(RuntimeLiveness, StallReportAppearsWhileTheBackgroundThreadIsBlocked) {
  RankSpec spec;
  spec.size = 3;
  spec.timeout_seconds = 30;
  spec.collective_timeout_ms = 60000;
  Settings settings = livenessSettings(0);  // liveness off: the block lasts until the kill
  settings.stall_check_disable = false;
  settings.stall_check_seconds = 1.0;
  const std::string log_path = "/tmp/ronde-liveness-stall-" + std::to_string(::getpid()) + ".log";
  auto outcomes = runJob(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    if (ctx.rank == 0) {
      FILE* f = std::fopen(log_path.c_str(), "w");
      ::dup2(fileno(f), 2);
    } else {
      ::freopen("/dev/null", "w", stderr);
    }
    publishPid(ctx);
    rt->enqueue(allreduceOf("warm", filledFloats(4, 1.0f)))->wait();
    std::shared_ptr<Handle> lonely;
    if (ctx.rank == 1) {
      // Announced at once (never seen before, so not cached), then rank 2 stops: rank 0's
      // background thread blocks in the next negotiation, before the check time is up.
      lonely = rt->enqueue(allreduceOf("lonely", filledFloats(4, 1.0f)));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ctx.store->setString("test/announced", "1");
    }
    if (ctx.rank == 2) {
      ctx.store->get("test/announced", std::chrono::seconds(20));
      ::raise(SIGSTOP);
      return;
    }
    if (ctx.rank == 0) {
      pid_t stopped = pidOf(ctx, 2);
      ctx.store->get("test/announced", std::chrono::seconds(20));
      std::string log;
      auto deadline = Clock::now() + std::chrono::seconds(15);
      while (Clock::now() < deadline) {
        std::fflush(stderr);
        log = readFile(log_path);
        if (log.find("background thread has been in one cycle") != std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      REQUIRE(isStopped(stopped), "rank 2 stayed stopped (the background thread is blocked)");
      REQUIRE(log.find("'lonely'") != std::string::npos,
              "a stall report names the tensor: " << log);
      REQUIRE(log.find("submitted by rank 1 (host") != std::string::npos,
              "and who submitted: " << log);
      REQUIRE(log.find("missing on rank 0 (host") != std::string::npos &&
                  log.find("rank 2 (host") != std::string::npos,
              "and the missing ranks: " << log);
      REQUIRE(log.find("background thread has been in one cycle") != std::string::npos,
              "and that the background thread is stuck: " << log);
      std::remove(log_path.c_str());
      ::kill(stopped, SIGKILL);
    }
    // The kill ends the block: the dead peer fails what was pending.
    try {
      if (lonely) lonely->wait(std::chrono::seconds(30));
    } catch (const Error&) {
    }
    for (int i = 0; i < 3000 && rt->isInitialized(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  expectKilledAndOthersPassed(outcomes, 2);
}

}  // namespace
}  // namespace ronde::testing
