// The stall inspector's reports, from a thread of their own (rank 0), so that they appear
// while the background thread is blocked inside a collective: that is when a stall matters
// most, and exactly when the background thread cannot speak. After every negotiation the
// background thread hands over the table's waiting requests (with the time each began to
// wait); this thread judges them against its own clock and logs what StallInspector says,
// noting how long the background thread has been stuck in one cycle when that is long too.
//
// Threads: publish() and cycleStarted() are for the background thread; the constructor starts
// the reporting thread, stop() (or the destructor) joins it. The communicator must outlive
// this object (it names ranks and hosts only: no collectives).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "ronde/communicator.h"
#include "runtime/negotiation_table.h"
#include "runtime/stall_inspector.h"

namespace ronde::runtime {

class StallReporter {
 public:
  using Clock = std::chrono::steady_clock;

  StallReporter(double check_seconds, const Communicator& comm);
  ~StallReporter();
  StallReporter(const StallReporter&) = delete;
  StallReporter& operator=(const StallReporter&) = delete;

  void stop();
  // The waiting requests as of the last negotiation.
  void publish(std::vector<NegotiationTable::Waiting> waiting);
  void cycleStarted(Clock::time_point at);

 private:
  void loop();

  StallInspector inspector_;  // reporting thread only
  const Clock::duration check_;
  const Communicator& comm_;
  std::atomic<Clock::rep> cycle_started_{0};  // Clock ticks since its epoch

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<NegotiationTable::Waiting> waiting_;  // guarded by mutex_
  bool stop_ = false;                               // guarded by mutex_

  std::thread thread_;  // last: starts once everything above is set
};

}  // namespace ronde::runtime
