// Liveness: every rank's heartbeat, and the watch over everyone else's.
//
// A small thread of its own bumps this rank's counter in the rendezvous store every interval
// and reads every peer's. A peer whose counter has not moved between two reads `timeout`
// apart is reported once through `on_silent`: its process is stopped (SIGSTOP, a debugger)
// or wedged so badly that even this thread cannot run. A rank that is merely busy (a long
// forward pass, a blocked background thread) keeps beating and is never reported.
//
// Why the store and not a path of its own: it is already the job's control plane, served by
// the launcher (which a stopped rank does not stop), authenticated, and reachable wherever
// the ranks met; heartbeats there cost the data plane nothing (no extra traffic on the shm
// arena or the TCP links, no lock the collectives take). Each round is one `add` for the
// beat and one per peer to read: N + 1 small requests per interval per rank, 60-125 us of CPU
// (2-8 ranks, client and server) on loopback, so ~0.01% of a core at the default 1 s interval.
// Judging only successful reads means a slow store delays detection but never causes it.
// The beats share the communicator's store client, which sends one request at a time: nobody
// may hold it in a long blocking get() while the runtime runs, or this rank's beats wait too.
//
// Threads: the constructor starts the thread; stop() (or the destructor) joins it. on_silent
// runs on the monitor's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ronde/store.h"

namespace ronde::runtime {

class LivenessMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  // The silent rank and how long its counter stood still.
  using OnSilent = std::function<void(int rank, double silent_seconds)>;

  LivenessMonitor(std::shared_ptr<Store> store, int rank, int size, double timeout_seconds,
                  OnSilent on_silent);
  ~LivenessMonitor();
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

  void stop();

  // Time between beats: a fifth of the timeout (so a live peer beats about five times per
  // timeout even when a round is late), between 10 ms and 1 s.
  static Clock::duration intervalFor(double timeout_seconds);
  // The store key holding `rank`'s heartbeat counter.
  static std::string key(int rank);

 private:
  struct Peer {
    std::optional<int64_t> beats;  // the counter at the last read that saw it move
    Clock::time_point moved_at;    // when that read returned
  };

  void loop();
  // One beat, then one read of every peer (until a report).
  void round();

  std::shared_ptr<Store> store_;
  const int rank_;
  const Clock::duration timeout_;
  const Clock::duration interval_;
  OnSilent on_silent_;
  std::vector<Peer> peers_;  // monitor thread only
  bool reported_ = false;    // monitor thread only: one report per monitor

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mutex_

  std::thread thread_;  // last: starts once everything above is set
};

}  // namespace ronde::runtime
