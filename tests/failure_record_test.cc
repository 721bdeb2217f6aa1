// The job's first-failure record: the first publisher's reason is what every rank reads, and
// a store that does not answer the publishing is given up, so that a failing rank, which
// publishes once for each communicator it aborts, waits on a stopped store once rather than
// once per communicator, and that once for the failure path's bound, not the store's own
// request timeout.
#include "comm/failure_record.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>

#include "common/socket.h"
#include "ronde/errors.h"
#include "support/multiprocess.h"

namespace ronde {
namespace {

// A store whose server is stopped. Until the store is given up, a request ends as the
// store's own request timeout would end it (kTimeout, counted), either at once (the wait
// compressed) or after a minute (the real wait, which only giving the store up cuts short).
// After that each request fails at once with kPeerLost, as the TCP client's do.
class StoppedStore final : public Store {
 public:
  enum class Wait { kNone, kAMinute };
  explicit StoppedStore(Wait wait = Wait::kNone) : wait_(wait) {}

  void set(const std::string&, const Bytes&) override { wait(); }
  Bytes get(const std::string&, Duration) override {
    wait();
    return {};
  }
  bool tryGet(const std::string&, Bytes*) override {
    wait();
    return false;
  }
  int64_t add(const std::string&, int64_t) override {
    wait();
    return 0;
  }
  void erase(const std::string&) override { wait(); }
  void abandon() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abandoned_ = true;
    }
    changed_.notify_all();
  }

  int timedOut() const { return timed_out_.load(); }
  bool abandoned() {
    std::lock_guard<std::mutex> lock(mutex_);
    return abandoned_;
  }

 private:
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto patience = std::chrono::seconds(wait_ == Wait::kNone ? 0 : 60);
    if (changed_.wait_for(lock, patience, [this] { return abandoned_; })) {
      throw Error(ErrorCode::kPeerLost, "the store was given up");
    }
    timed_out_.fetch_add(1);
    throw Error(ErrorCode::kTimeout, "rendezvous store at h:1: timed out receiving");
  }

  const Wait wait_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool abandoned_ = false;  // guarded by mutex_
  std::atomic<int> timed_out_{0};
};

// A store that answers but may not be given up.
class AnsweringStore final : public Store {
 public:
  void set(const std::string& k, const Bytes& v) override { inner_->set(k, v); }
  Bytes get(const std::string& k, Duration t) override { return inner_->get(k, t); }
  bool tryGet(const std::string& k, Bytes* v) override { return inner_->tryGet(k, v); }
  int64_t add(const std::string& k, int64_t d) override { return inner_->add(k, d); }
  void erase(const std::string& k) override { inner_->erase(k); }
  void abandon() override { abandoned = true; }
  bool abandoned = false;

 private:
  std::shared_ptr<Store> inner_ = makeMemoryStore();
};

TEST(FailureRecord, TheFirstPublishedFailureIsTheOneEveryRankReads) {
  AnsweringStore store;
  EXPECT_FALSE(publishedFirstFailure(store, Duration(0)).has_value());
  publishFirstFailure(store, ErrorCode::kMismatch, "rank 2 (host b): allreduce 'w' of 4 floats");
  publishFirstFailure(store, ErrorCode::kPeerLost, "rank 0 (host a): rank 2 closed its link");
  const auto first = publishedFirstFailure(store, Duration(0));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->code(), ErrorCode::kMismatch);
  EXPECT_NE(std::string(first->what()).find("rank 2 (host b): allreduce 'w' of 4 floats"),
            std::string::npos)
      << first->what();
  EXPECT_FALSE(store.abandoned);
}

TEST(FailureRecord, AStoreThatLetsThePublishingTimeOutIsGivenUp) {
  StoppedStore store;
  publishFirstFailure(store, ErrorCode::kTimeout, "rank 1: allreduce 'w' timed out");  // no throw
  EXPECT_EQ(store.timedOut(), 1);
  EXPECT_TRUE(store.abandoned());
  // Later publishes and reads of this process fail at once instead of waiting again.
  publishFirstFailure(store, ErrorCode::kAborted, "rank 1: shutting down");
  EXPECT_FALSE(publishedFirstFailure(store, Duration(1000)).has_value());
  EXPECT_EQ(store.timedOut(), 1);
}

TEST(FailureRecord, AFailingCommunicatorReportsThePublishedCauseInsteadOfItsEcho) {
  AnsweringStore store;
  const Error echo(ErrorCode::kPeerLost, "rank 1 (host a): rank 2 closed its connection");
  EXPECT_STREQ(failureToReport(store, echo, Duration(0)).what(), echo.what());  // none yet
  publishFirstFailure(store, ErrorCode::kMismatch, "rank 2 (host b): allreduce 'w' of 4 floats");
  const Error reported = failureToReport(store, echo, Duration(0));
  EXPECT_EQ(reported.code(), ErrorCode::kMismatch);
  EXPECT_NE(std::string(reported.what()).find("rank 2 (host b)"), std::string::npos)
      << reported.what();
  // A failure of its own (not an echo) is reported as it is.
  const Error own(ErrorCode::kTimeout, "rank 1 (host a): allreduce 'w' timed out");
  EXPECT_EQ(failureToReport(store, own, Duration(0)).code(), ErrorCode::kTimeout);
  EXPECT_FALSE(store.abandoned);
}

TEST(FailureRecord, AFailingCommunicatorGivesUpAStoreThatLetsItsReadTimeOut) {
  StoppedStore store;
  const Error echo(ErrorCode::kAborted, "rank 1 (host a): the communicator was aborted");
  const Error reported = failureToReport(store, echo, Duration(1000));
  EXPECT_EQ(reported.code(), ErrorCode::kAborted);
  EXPECT_STREQ(reported.what(), echo.what());
  EXPECT_TRUE(store.abandoned());
  publishFirstFailure(store, ErrorCode::kAborted, echo.what());  // at once now
  EXPECT_EQ(store.timedOut(), 1);
}

TEST(FailureRecord, APublishThatGetsNoAnswerIsEndedByTheFailurePathsBound) {
  StoppedStore store(StoppedStore::Wait::kAMinute);
  publishFirstFailure(store, ErrorCode::kTimeout, "rank 1: allreduce 'w' timed out",
                      Duration(200));
  EXPECT_TRUE(store.abandoned());
  EXPECT_EQ(store.timedOut(), 0) << "the request waited out the store's own timeout";
}

TEST(FailureRecord, AReadThatGetsNoAnswerIsEndedByTheFailurePathsBound) {
  StoppedStore store(StoppedStore::Wait::kAMinute);
  const Error echo(ErrorCode::kPeerLost, "rank 1 (host a): rank 2 closed its connection");
  const Error reported = failureToReport(store, echo, Duration(100), Duration(200));
  EXPECT_STREQ(reported.what(), echo.what());
  EXPECT_TRUE(store.abandoned());
  EXPECT_EQ(store.timedOut(), 0) << "the read waited out the store's own timeout";
}

// The TCP client against a server that accepted the connection (the kernel does that for a
// stopped process) and never answers: the client's own request timeout is a minute.
TEST(FailureRecord, ATcpStoreWhoseServerIsSilentIsGivenUpWithinTheBound) {
  UniqueFd listener = listenTcp("127.0.0.1", 0, 16);
  auto store = makeTcpStore("127.0.0.1", boundPort(listener.get()), "", std::chrono::seconds(60));
  const auto began = std::chrono::steady_clock::now();
  const Error echo(ErrorCode::kAborted, "rank 1 (host a): the communicator was aborted");
  EXPECT_STREQ(failureToReport(*store, echo, Duration(0), Duration(300)).what(), echo.what());
  publishFirstFailure(*store, ErrorCode::kAborted, echo.what(), Duration(300));
  publishFirstFailure(*store, ErrorCode::kAborted, echo.what(), Duration(300));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  // Not a timing of ronde: the alternative is three waits of a minute each.
  EXPECT_LT(took, 30) << "the silent store was waited on for its own request timeout";
  EXPECT_THROW(store->add("k", 1), Error);  // given up: fails at once
}

TEST(FailureRecord, PollingTheRecordKeepsAStoreThatDoesNotAnswer) {
  // Polled while a communicator forms or waits, where nothing is failing: the store may only
  // be slow, and the liveness monitor judges it.
  StoppedStore store;
  EXPECT_FALSE(publishedFirstFailure(store, Duration(0)).has_value());
  EXPECT_FALSE(store.abandoned());
}

// A communicator polls the record while a collective waits; against a store whose server
// accepted the connection and never answers, each poll ends at the bound its wait gives it
// (the store's own request timeout is a minute), and the store is kept.
TEST(FailureRecord, APollOfASilentTcpStoreEndsAtItsAnswerBoundAndKeepsTheStore) {
  UniqueFd listener = listenTcp("127.0.0.1", 0, 16);
  auto store = makeTcpStore("127.0.0.1", boundPort(listener.get()), "", std::chrono::seconds(60));
  const auto began = std::chrono::steady_clock::now();
  EXPECT_FALSE(publishedFirstFailure(*store, Duration(0), Duration(300)).has_value());
  EXPECT_FALSE(publishedFirstFailure(*store, Duration(0), Duration(300)).has_value());
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  // Not a timing of ronde: the alternative is two waits of a minute each.
  EXPECT_LT(took, 20) << "a poll waited out the store's own request timeout";
  try {
    store->tryGetWithin("k", nullptr, Duration(100));
    ADD_FAILURE() << "the silent store answered";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout) << "the store was given up: " << error.what();
  }
}

TEST(FailureRecord, APollsAnswerBoundIsWhatIsLeftOfItsWaitAtMostTheFailurePathsBound) {
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(pollAnswerBound(now - std::chrono::seconds(1)), Duration(0));
  EXPECT_EQ(pollAnswerBound(std::chrono::steady_clock::time_point::max()),
            kFailurePathAnswerBound);
  EXPECT_EQ(pollAnswerBound(now + std::chrono::hours(1)), kFailurePathAnswerBound);
  const Duration left = pollAnswerBound(now + std::chrono::seconds(2));
  EXPECT_GT(left, Duration(1000));
  EXPECT_LE(left, Duration(2000));
}

// The runtime aborts every communicator it built (the world, the control channel, each process
// set's), each publishing the failure; with the store stopped, only the first may wait on it.
TEST(FailureRecord, AbortingSeveralCommunicatorsWaitsOnAStoppedStoreOnce) {
  testing::RankSpec spec;
  spec.size = 2;
  spec.timeout_seconds = 60;
  spec.collective_timeout_ms = 20000;
  const auto outcomes = testing::runProcessesRaw(spec, [&](int rank, int port) {
    auto failures = std::make_shared<StoppedStore>();
    CommOptions options;
    options.rank = rank;
    options.size = spec.size;
    options.store = testing::connectStore(spec, port);
    options.failure_store = failures;
    options.timeout = std::chrono::milliseconds(spec.collective_timeout_ms);
    options.start_timeout = std::chrono::seconds(30);
    auto world = Communicator::create(options);
    auto set = world->subCommunicator({0, 1}, "set");
    world->barrier();
    if (rank == 1) return;  // its links close; rank 0 aborts on its own
    // Forming the set polled the record too (and kept the store: nothing was failing then).
    const int before = failures->timedOut();
    world->abort(ErrorCode::kTimeout, "rank 0: allreduce 'w' timed out");
    set->abort(ErrorCode::kTimeout, "rank 0: allreduce 'w' timed out");
    world->abort(ErrorCode::kTimeout, "rank 0: allreduce 'w' timed out");
    const int waits = failures->timedOut() - before;
    if (waits != 1 || !failures->abandoned()) {
      throw std::runtime_error("the stopped store was waited on " + std::to_string(waits) +
                               " times, given up: " + (failures->abandoned() ? "yes" : "no"));
    }
  });
  for (const auto& outcome : outcomes) {
    EXPECT_TRUE(outcome.exit_code == 0 && outcome.message.empty())
        << "rank " << outcome.rank << ": " << outcome.message;
  }
}

}  // namespace
}  // namespace ronde
