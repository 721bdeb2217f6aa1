#include "runtime/liveness_monitor.h"

#include <algorithm>

#include "comm/failure_record.h"
#include "common/logging.h"

namespace ronde::runtime {

LivenessMonitor::LivenessMonitor(std::shared_ptr<Store> store, int rank, int size,
                                 double timeout_seconds, OnSilent on_silent, OnFailed on_failed,
                                 int store_server_rank)
    : store_(std::move(store)),
      rank_(rank),
      timeout_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(timeout_seconds))),
      interval_(intervalFor(timeout_seconds)),
      on_silent_(std::move(on_silent)),
      on_failed_(std::move(on_failed)),
      store_server_(store_server_rank >= 0 && store_server_rank < size && store_server_rank != rank
                        ? store_server_rank
                        : -1),
      answered_at_(Clock::now().time_since_epoch().count()) {
  RONDE_CHECK(store_ != nullptr, "liveness needs the rendezvous store");
  for (int r : watchedBy(rank, size)) peers_.push_back(Peer{r, std::nullopt, {}});
  thread_ = std::thread([this] { loop(); });
  if (store_server_ >= 0) store_watch_ = std::thread([this] { watchStore(); });
}

LivenessMonitor::~LivenessMonitor() { stop(); }

void LivenessMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (store_watch_.joinable()) store_watch_.join();
}

LivenessMonitor::Clock::duration LivenessMonitor::intervalFor(double timeout_seconds) {
  auto fifth = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(timeout_seconds / 5));
  return std::clamp<Clock::duration>(fifth, std::chrono::milliseconds(10), std::chrono::seconds(1));
}

std::string LivenessMonitor::key(int rank) { return "liveness/" + std::to_string(rank); }

std::string LivenessMonitor::silentKey(int rank) {
  return "liveness/silent/" + std::to_string(rank);
}

std::vector<int> LivenessMonitor::watchedBy(int rank, int size) {
  std::vector<int> watched;
  for (int i = 1; i <= std::min(kWatched, size - 1); ++i) watched.push_back((rank + i) % size);
  return watched;
}

void LivenessMonitor::loop() {
  bool store_slow_reported = false;
  for (;;) {
    try {
      round();
      store_slow_reported = false;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kPeerLost) {
        // The store went away (the job is ending, or its server died; or the store watch gave
        // it up): nothing left to judge.
        log(LogLevel::kDebug, "liveness heartbeats stop: ", e.what());
        {
          std::lock_guard<std::mutex> lock(mutex_);
          store_gone_ = true;
        }
        wake_.notify_all();
        return;
      }
      // Without answers nobody can be judged; peers are judged again once the store answers.
      if (!store_slow_reported) log(LogLevel::kWarning, "liveness heartbeat failed: ", e.what());
      store_slow_reported = true;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, interval_, [this] { return stop_; })) return;
  }
}

void LivenessMonitor::noteAnswer() { answered_at_.store(Clock::now().time_since_epoch().count()); }

void LivenessMonitor::round() {
  store_->add(key(rank_), 1);
  noteAnswer();
  if (reported_.load()) return;  // still beating: the watchers may be judging this rank
  for (Peer& peer : peers_) {
    const int64_t beats = store_->add(key(peer.rank), 0);
    noteAnswer();
    const auto now = Clock::now();
    if (!peer.beats || *peer.beats != beats) {
      peer.beats = beats;
      peer.moved_at = now;
      continue;
    }
    // Both reads succeeded, `timeout` apart, and the counter stood still between them.
    if (now - peer.moved_at >= timeout_) {
      if (claimReport()) {
        // The store answered this round, so this costs one quick request. Best effort: the
        // report to the peers below matters more than this note.
        try {
          store_->setString(silentKey(peer.rank), std::to_string(rank_));
        } catch (const Error& e) {
          log(LogLevel::kDebug, "could not record rank ", peer.rank, " as silent: ", e.what());
        }
        on_silent_(peer.rank, std::chrono::duration<double>(now - peer.moved_at).count(), [] {});
      }
      return;
    }
  }
  // No grace for a writer that counted itself in but has not written yet: the next round
  // reads again.
  if (auto first = publishedFirstFailure(*store_, Duration{0})) {
    if (claimReport()) on_failed_(*first);
  }
}

void LivenessMonitor::watchStore() {
  // The silence counts from the later of the last answer and the last time this thread woke
  // late: a wake-up later than an interval past its due time means this process was stopped
  // or starved itself, and what the store did meanwhile cannot be told.
  auto judging_since = Clock::now();
  auto due = judging_since + interval_;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (wake_.wait_until(lock, due, [this] { return stop_ || store_gone_; })) return;
    const auto now = Clock::now();
    if (now - due > interval_) judging_since = now;
    due = now + interval_;
    const auto answered = Clock::time_point(Clock::duration(answered_at_.load()));
    const auto silent = now - std::max(answered, judging_since);
    if (silent < timeout_) continue;
    if (!claimReport()) return;  // the monitor reported first
    lock.unlock();
    // Before the abort that the report starts: the round waiting on the store returns, and
    // the abort publishes nothing there instead of waiting out the store's request timeout.
    on_silent_(store_server_, std::chrono::duration<double>(silent).count(),
               [this] { store_->abandon(); });
    return;
  }
}

}  // namespace ronde::runtime
