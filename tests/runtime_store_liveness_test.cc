// Liveness where a rank serves the rendezvous store itself (rank 0 under mpirun or srun without
// `ronde run`): stopping that rank stops the store, so no heartbeat is read at all. The store
// watch must report the serving rank when the store stops answering, give the store up so that
// nothing waits out its request timeouts, and report nothing for a store that is only slow or
// that closes as the job ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/liveness_monitor.h"
#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"
#include "support/stopped_rank_checks.h"

namespace ronde::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A store server that can stop answering or close, and its clients: each client's calls wait
// while the server is stopped (until that client is abandoned), throw kPeerLost once it has
// closed, and take `delay` each.
class StoreServer {
 public:
  enum class State { kAnswering, kStopped, kClosed };

  explicit StoreServer(Duration delay = Duration(0)) : delay_(delay) {}

  void setState(State state) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = state;
    changed_.notify_all();
  }

  class Client final : public Store {
   public:
    explicit Client(StoreServer& server) : server_(server) {}
    void set(const std::string& key, const Bytes& value) override {
      reach();
      server_.inner_->set(key, value);
    }
    Bytes get(const std::string& key, Duration timeout) override {
      reach();
      return server_.inner_->get(key, timeout);
    }
    bool tryGet(const std::string& key, Bytes* value) override {
      reach();
      return server_.inner_->tryGet(key, value);
    }
    int64_t add(const std::string& key, int64_t delta) override {
      reach();
      return server_.inner_->add(key, delta);
    }
    void erase(const std::string& key) override {
      reach();
      server_.inner_->erase(key);
    }
    void abandon() override {
      std::lock_guard<std::mutex> lock(server_.mutex_);
      abandoned_ = true;
      server_.changed_.notify_all();
    }
    bool abandoned() {
      std::lock_guard<std::mutex> lock(server_.mutex_);
      return abandoned_;
    }

   private:
    // An answer after the delay, or none while stopped (30 s at most: a bound on the test, not
    // the behaviour checked), or a closed connection.
    void reach() {
      if (server_.delay_.count() > 0) std::this_thread::sleep_for(server_.delay_);
      std::unique_lock<std::mutex> lock(server_.mutex_);
      const bool freed = server_.changed_.wait_for(
          lock, 30s, [this] { return abandoned_ || server_.state_ != State::kStopped; });
      if (abandoned_) throw Error(ErrorCode::kPeerLost, "the store was given up");
      if (!freed) throw Error(ErrorCode::kTimeout, "the stopped server never answered");
      if (server_.state_ == State::kClosed) throw Error(ErrorCode::kPeerLost, "server closed");
    }

    StoreServer& server_;
    bool abandoned_ = false;  // guarded by server_.mutex_
  };

 private:
  const std::shared_ptr<Store> inner_ = makeMemoryStore();
  const Duration delay_;
  std::mutex mutex_;
  std::condition_variable changed_;
  State state_ = State::kAnswering;  // guarded by mutex_
};

// Every rank's monitor of a job of `size`, each with its own client of `server`, served by
// rank `server_rank`; and what each reported.
struct Job {
  struct Reports {
    std::atomic<int> count{0};
    std::atomic<int> rank{-1};
    std::atomic<double> seconds{0};
    // The store had been given up before the report reached its handler: too early, since
    // that frees this rank's other waits before the finding is recorded.
    std::atomic<bool> abandoned_before{false};
  };
  std::vector<std::shared_ptr<StoreServer::Client>> clients;
  std::vector<std::unique_ptr<Reports>> reports;
  std::vector<std::unique_ptr<runtime::LivenessMonitor>> monitors;

  Job(StoreServer& server, int size, double timeout_seconds, int server_rank = 0) {
    for (int r = 0; r < size; ++r) {
      clients.push_back(std::make_shared<StoreServer::Client>(server));
      reports.push_back(std::make_unique<Reports>());
    }
    for (int r = 0; r < size; ++r) {
      Reports* mine = reports[static_cast<size_t>(r)].get();
      StoreServer::Client* client = clients[static_cast<size_t>(r)].get();
      monitors.push_back(std::make_unique<runtime::LivenessMonitor>(
          clients[static_cast<size_t>(r)], r, size, timeout_seconds,
          [mine, client](int rank, double seconds, const std::function<void()>& before_telling) {
            mine->abandoned_before = client->abandoned();
            mine->rank = rank;
            mine->seconds = seconds;
            ++mine->count;
            before_telling();
          },
          [mine](const Error&) { ++mine->count; }, server_rank));
    }
  }
  int total() const {
    int n = 0;
    for (const auto& r : reports) n += r->count.load();
    return n;
  }
  int abandoned() const {
    int n = 0;
    for (const auto& c : clients) n += c->abandoned() ? 1 : 0;
    return n;
  }
  Reports& of(int rank) { return *reports[static_cast<size_t>(rank)]; }
};

bool waitFor(const std::function<bool()>& done, Clock::duration limit) {
  const auto deadline = Clock::now() + limit;
  while (!done() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  return done();
}

// Once the store that rank 0 serves stops answering, ranks 1 and 2 each report rank 0 after
// the timeout (though neither could read its counter, nor each other's), the store is given
// up (by the report's handler, once it has recorded the report), and every monitor stops at
// once instead of waiting on it. Rank 0 reports nobody.
TEST(LivenessStoreWatch, ReportsTheServingRankWhenTheStoreStopsAnswering) {
  StoreServer server;
  Job job(server, 3, 1.0);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(job.total(), 0) << "a report while the store answered";
  const auto stopped_at = Clock::now();
  server.setState(StoreServer::State::kStopped);
  ASSERT_TRUE(waitFor([&] { return job.of(1).count > 0 && job.of(2).count > 0; }, 10s))
      << "ranks 1 and 2 did not both report";
  const double took = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 4.0);
  for (int r : {1, 2}) {
    EXPECT_EQ(job.of(r).rank.load(), 0) << "rank " << r;
    EXPECT_GE(job.of(r).seconds.load(), 1.0) << "rank " << r;
    EXPECT_FALSE(job.of(r).abandoned_before.load())
        << "rank " << r << " gave the store up before its report was recorded";
  }
  EXPECT_TRUE(job.clients[1]->abandoned() && job.clients[2]->abandoned())
      << "the store was not given up";
  EXPECT_FALSE(job.clients[0]->abandoned()) << "rank 0 serves it: nothing to give up";
  job.clients[0]->abandon();  // in a job, rank 0 stays stopped until killed: no need to wait
  const auto stopping = Clock::now();
  job.monitors.clear();
  EXPECT_LT(Clock::now() - stopping, 1s);
  EXPECT_EQ(job.of(0).count.load(), 0) << "rank 0 reported rank " << job.of(0).rank.load();
  EXPECT_EQ(job.total(), 2) << "one report per monitor";
}

// A store that takes 100 ms over each request (400 ms a round), under a timeout of 1.5 s, is
// slow, not stopped.
TEST(LivenessStoreWatch, AStoreSlowToAnswerIsNotAStoppedOne) {
  StoreServer server(100ms);
  Job job(server, 3, 1.5);
  std::this_thread::sleep_for(3s);
  job.monitors.clear();
  EXPECT_EQ(job.total(), 0);
  EXPECT_EQ(job.abandoned(), 0);
}

// The serving rank's store closing (the job ends, its process exits) ends the heartbeats and
// the watch: nobody is reported however long it stays closed.
TEST(LivenessStoreWatch, AStoreThatClosesEndsTheWatchUnreported) {
  StoreServer server;
  Job job(server, 3, 1.0);
  std::this_thread::sleep_for(500ms);
  server.setState(StoreServer::State::kClosed);
  std::this_thread::sleep_for(2500ms);
  job.monitors.clear();
  EXPECT_EQ(job.total(), 0);
  EXPECT_EQ(job.abandoned(), 0);
}

// Where no rank serves the store (the launcher does), a stopped store reports nobody: the
// monitors wait on it, as they always did.
TEST(LivenessStoreWatch, NoWatchWhereNoRankServesTheStore) {
  StoreServer server;
  Job job(server, 3, 1.0, /*server_rank=*/-1);
  std::this_thread::sleep_for(500ms);
  server.setState(StoreServer::State::kStopped);
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(job.total(), 0);
  EXPECT_EQ(job.abandoned(), 0);
  for (auto& client : job.clients) client->abandon();  // lets the rounds in flight return
  job.monitors.clear();
}

// Three ranks on two hosts, met through a store that rank 0's process serves (as under mpirun):
// rank 0 stops inside a 16 MiB allreduce. Ranks 1 and 2 fail with kPeerLost naming rank 0 and
// its host within the liveness timeout and a few seconds (the collective timeout is 60 s, the
// store's request timeout 30 s), and their shutdown does not wait on the stopped store.
TEST(RuntimeStoreLiveness, AStoppedRankThatServesTheStoreFailsEveryOtherRankNamingIt) {
  RankSpec spec;
  spec.size = 3;
  spec.hosts = {"hostA", "hostA", "hostB"};  // rank 1 shares memory with rank 0, rank 2 TCP
  spec.timeout_seconds = 40;
  spec.collective_timeout_ms = 60000;
  spec.store_server_rank = 0;
  Settings settings = runtimeTestSettings();
  settings.liveness_timeout_seconds = 2.5;
  auto outcomes = runProcessesRaw(spec, [&](int rank, int port) {
    ::freopen("/dev/null", "w", stderr);
    // The test's own store only tells the ranks where rank 0's store is, and the pids.
    auto harness = connectStore(spec, port);
    std::unique_ptr<TcpStoreServer> served;
    if (rank == 0) {
      served = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "");
      harness->setString("served/port", std::to_string(served->port()));
    }
    const int served_port = std::stoi(harness->getString("served/port", 20s));
    auto store = std::make_shared<PrefixStore>(
        makeTcpStore("127.0.0.1", served_port, "", Duration(30000)), "world");
    auto rt = Runtime::init(settings, makeCommunicator(spec, rank, spec.size, store));
    harness->setString("pid/" + std::to_string(rank), std::to_string(::getpid()));
    rt->enqueue(allreduceOf("warm", filledFloats(1000, 1.0f)))->wait();
    auto step = rt->enqueue(allreduceOf("step", filledFloats(4 << 20, 1.0f)));
    if (rank == 0) {
      ::raise(SIGSTOP);  // the store's thread stops with the rest
      return;
    }
    const std::string what = requirePeerLost(*step, 0, "hostA");
    REQUIRE(what.find("RONDE_LIVENESS_TIMEOUT_SECONDS is 2.5)") != std::string::npos, what);
    REQUIRE(!rt->isInitialized(), "the runtime stopped");
    const auto shutting_down = Clock::now();
    rt->shutdown();
    const double took = std::chrono::duration<double>(Clock::now() - shutting_down).count();
    REQUIRE(took < 5, "shutdown took " << took << " s beside the stopped store");
    // Rank 0 stays stopped until both have checked: killed, its store would close instead.
    harness->setString("checked/" + std::to_string(rank), "yes");
    if (rank == 1) {
      harness->getString("checked/2", 20s);
      const pid_t stopped = static_cast<pid_t>(std::stol(harness->getString("pid/0", 20s)));
      REQUIRE(isStopped(stopped), "rank 0 is still stopped, not dead");
      ::kill(stopped, SIGKILL);
    }
  });
  expectKilledAndOthersPassed(outcomes, 0);
}

}  // namespace
}  // namespace ronde::testing
