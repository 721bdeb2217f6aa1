#pragma once

#include <chrono>

namespace ronde::runtime {

// What one cycle's negotiation found, as far as the pacing of the next cycle cares.
struct CycleOutcome {
  bool progressed = false;        // some response was ready and ran
  bool everyone_idle = false;     // no rank had anything pending, nothing waits in the table
  bool some_rank_free = false;    // some rank negotiated with nothing pending at all
  bool waiting_on_peers = false;  // this rank still holds requests its peers have not matched
};

// When the background loop starts its next cycle. A cycle runs as soon as work arrives (the
// loop waits on the enqueue, not only on the clock), so a lone request does not wait out the
// cycle time; requests that arrive while a cycle runs are batched into the next one, which is
// where Tensor Fusion gets its many-tensor steps. A rank whose requests wait for its peers goes
// straight back into negotiation, where it waits for them, when that cannot spin: the last
// cycle made progress, or some rank had nothing pending and so only comes when its own work
// arrives or its clock runs out. Otherwise it sleeps like an idle rank.
// Every rank sees the same `everyone_idle` sequence, so idle stretching stays in step.
// Background thread only.
class CyclePacer {
 public:
  struct Next {
    bool at_once = false;  // start the next cycle without waiting
    double sleep_ms = 0;   // otherwise wait this long, or until work arrives
  };

  Next afterCycle(const CycleOutcome& outcome, double cycle_ms);

  // Cycles in a row in which no rank had anything to do.
  int idleCycles() const { return idle_cycles_; }

 private:
  int idle_cycles_ = 0;
};

}  // namespace ronde::runtime
