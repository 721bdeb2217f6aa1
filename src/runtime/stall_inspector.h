// The stall inspector: when some ranks have submitted a request and others have not for
// longer than the check time, reports which requests wait on which ranks (rank 0 logs it,
// once per check interval); past the shutdown time (if set) it asks for the runtime to stop.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "ronde/communicator.h"
#include "runtime/negotiation_table.h"

namespace ronde::runtime {

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  StallInspector(double check_seconds, double shutdown_seconds, bool disabled);

  // How long a request may wait on the cached path before it is announced in full, so that
  // the inspector can see who is missing.
  Clock::duration cachedPatience() const;
  // Returns a report to log ("" when there is nothing new to say).
  std::string inspect(const std::vector<NegotiationTable::Waiting>& waiting,
                      const Communicator& comm, Clock::time_point now);
  // True once a request has waited past the shutdown time.
  bool shouldShutDown(const std::vector<NegotiationTable::Waiting>& waiting,
                      Clock::time_point now) const;

 private:
  Clock::duration check_;
  Clock::duration shutdown_;
  bool disabled_;
  Clock::time_point last_report_{};
};

}  // namespace ronde::runtime
