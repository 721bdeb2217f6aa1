#include "runtime/cycle_pacer.h"

#include <algorithm>

namespace ronde::runtime {

CyclePacer::Next CyclePacer::afterCycle(const CycleOutcome& outcome, double cycle_ms) {
  idle_cycles_ = outcome.everyone_idle ? idle_cycles_ + 1 : 0;
  Next next;
  if (outcome.waiting_on_peers && (outcome.progressed || outcome.some_rank_free)) {
    next.at_once = true;
    return next;
  }
  // After a while with nothing to do anywhere, cycles stretch up to 10 ms (never shorter than
  // the cycle time): an idle runtime then costs almost no CPU, and since arriving work ends
  // the wait, it adds no latency.
  constexpr int kPatience = 20;
  next.sleep_ms = cycle_ms;
  if (idle_cycles_ > kPatience) {
    double stretched = cycle_ms * static_cast<double>(1 << std::min(idle_cycles_ - kPatience, 10));
    next.sleep_ms = std::min(stretched, std::max(cycle_ms, 10.0));
  }
  return next;
}

}  // namespace ronde::runtime
