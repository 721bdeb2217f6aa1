// Liveness: every rank's heartbeat, and a watch over a few peers and the job's failure record.
//
// A small thread of its own bumps this rank's counter in the rendezvous store every interval
// and reads the counters of the next kWatched ranks around the ring (rank r watches r+1 and
// r+2, so every rank has two watchers). A watched peer whose counter has not moved between two
// reads `timeout` apart is reported once through `on_silent`: its process is stopped (SIGSTOP,
// a debugger) or wedged so badly that even this thread cannot run. A rank that is merely busy
// (a long forward pass, a blocked background thread) keeps beating and is never reported.
//
// Every other rank learns of it from the job's failure record (comm/failure_record.h), which
// the watcher's abort publishes and every round reads: `on_failed` then gets that first
// failure. This matters where links alone say nothing: a rank blocked on the stopped peer's
// link sees no close until the collective timeout. So a round costs kWatched + 2 small
// requests whatever the job's size (the beat, the watched counters, the record): 4N per
// interval for N ranks, where reading every peer cost N(N+1), 16512 for 128 ranks. Detection
// by a non-watcher takes at most one interval (timeout / 5) longer than by a watcher. Any set
// of stopped ranks short of the whole job holds one whose predecessor still runs, so some
// watcher always reports one of them.
//
// Why the store and not a path of its own: it is already the job's control plane, served by
// the launcher (which a stopped rank does not stop), authenticated, and reachable wherever
// the ranks met; heartbeats there cost the data plane nothing (no extra traffic on the shm
// arena or the TCP links, no lock the collectives take). Judging only successful reads means
// a slow store delays detection but never causes it. The beats share the communicator's store
// client, which sends one request at a time: nobody may hold it in a long blocking get() while
// the runtime runs, or this rank's beats wait too.
//
// Except where a rank serves the store itself (`store_server_rank`: rank 0 under mpirun or
// srun without `ronde run`): stopping that rank stops the store, every round then waits on it,
// and no counter is read at all. So there a second thread, the store watch, judges the store:
// when it has answered none of the monitor's requests for `timeout` while the watch itself was
// awake throughout (a process that was itself stopped or starved judges nothing), the serving
// rank is reported through `on_silent`, whose handler abandons the store (Store::abandon)
// through its `before_telling` step: that frees the round waiting on it and lets the abort
// that follows skip the store instead of waiting out its request timeouts. A store that
// closes (the job ending) ends the watch unreported.
//
// Threads: the constructor starts the thread (and the store watch); stop() (or the destructor)
// joins them. on_silent and on_failed run on either; there is one report per monitor, after
// which the monitor only beats.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde::runtime {

class LivenessMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  // The silent rank, how long it was silent, and what the handler runs once it has recorded
  // that finding and before it tells the peers: nothing, or, where the silent rank serves the
  // store, giving the store up (see below). Recording first matters: giving up frees every
  // wait on the store, and this rank's background thread, freed there with only the echo of
  // another rank's abort (a link that closed), must find the finding already recorded.
  using OnSilent = std::function<void(int rank, double silent_seconds,
                                      const std::function<void()>& before_telling)>;
  // The job's first failure, published by another rank (or by this one).
  using OnFailed = std::function<void(const Error& first_failure)>;
  // How many ranks each rank watches (fewer where the job has fewer peers).
  static constexpr int kWatched = 2;

  // `store` holds the heartbeats and the job's failure record (the world communicator's);
  // `store_server_rank` serves it (-1: no rank does).
  LivenessMonitor(std::shared_ptr<Store> store, int rank, int size, double timeout_seconds,
                  OnSilent on_silent, OnFailed on_failed, int store_server_rank = -1);
  ~LivenessMonitor();
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

  void stop();

  // Time between beats: a fifth of the timeout (so a live peer beats about five times per
  // timeout even when a round is late), between 10 ms and 1 s.
  static Clock::duration intervalFor(double timeout_seconds);
  // The store key holding `rank`'s heartbeat counter.
  static std::string key(int rank);
  // The store key where a watcher that found `rank` silent names itself (its rank), before it
  // reports it: a structured finding for whoever serves the store and can act on the process
  // (the elastic driver kills a stopped worker; the failure record's text is for people).
  static std::string silentKey(int rank);
  // The ranks `rank` watches in a job of `size`.
  static std::vector<int> watchedBy(int rank, int size);

 private:
  struct Peer {
    int rank;
    std::optional<int64_t> beats;  // the counter at the last read that saw it move
    Clock::time_point moved_at;    // when that read returned
  };

  void loop();
  // One beat, then one read of each watched peer and of the failure record (until a report).
  void round();
  // The store watch's loop (only where another rank serves the store), and what it reads: the
  // time of the store's last answer.
  void watchStore();
  void noteAnswer();
  // True for the one caller that may report.
  bool claimReport() { return !reported_.exchange(true); }

  std::shared_ptr<Store> store_;
  const int rank_;
  const Clock::duration timeout_;
  const Clock::duration interval_;
  OnSilent on_silent_;
  OnFailed on_failed_;
  std::vector<Peer> peers_;  // the watched ranks; monitor thread only
  std::atomic<bool> reported_{false};  // one report per monitor
  const int store_server_;             // the rank the store watch judges; -1: no watch
  // When the store last answered one of this monitor's requests (Clock ticks since its epoch):
  // a store slow to answer each is not a stopped one.
  std::atomic<Clock::rep> answered_at_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;         // guarded by mutex_
  bool store_gone_ = false;   // guarded by mutex_: its server closed (the job is ending)

  std::thread thread_;       // after everything above is set: they start last
  std::thread store_watch_;
};

}  // namespace ronde::runtime
