#include "runtime/stall_inspector.h"

#include <sstream>

namespace ronde::runtime {
namespace {

StallInspector::Clock::duration seconds(double s) {
  return std::chrono::duration_cast<StallInspector::Clock::duration>(
      std::chrono::duration<double>(s));
}

std::string rankList(const std::vector<int>& ranks, const Communicator& comm) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << comm.describeRank(ranks[i]);
  return out.str();
}

}  // namespace

StallInspector::StallInspector(double check_seconds, double shutdown_seconds, bool disabled)
    : check_(seconds(check_seconds)), shutdown_(seconds(shutdown_seconds)), disabled_(disabled) {}

StallInspector::Clock::duration StallInspector::cachedPatience() const {
  if (disabled_) return Clock::duration::max();
  return std::max<Clock::duration>(check_ / 2, std::chrono::milliseconds(10));
}

std::string StallInspector::inspect(const std::vector<NegotiationTable::Waiting>& waiting,
                                    const Communicator& comm, Clock::time_point now) {
  if (disabled_ || now - last_report_ < check_) return "";
  std::ostringstream out;
  int stalled = 0;
  for (const auto& w : waiting) {
    if (now - w.since < check_) continue;
    ++stalled;
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - w.since).count();
    out << "\n  '" << w.key.second << "'";
    if (w.key.first != 0) out << " (process set " << w.key.first << ")";
    out << " waited " << waited / 1000.0 << " s: submitted by " << rankList(w.announced, comm)
        << "; missing on " << rankList(w.missing, comm);
  }
  if (stalled == 0) return "";
  last_report_ = now;
  return "stall: " + std::to_string(stalled) +
         " request(s) submitted by some ranks and not by others (one rank may have stopped "
         "submitting, or submits different names):" +
         out.str();
}

bool StallInspector::shouldShutDown(const std::vector<NegotiationTable::Waiting>& waiting,
                                    Clock::time_point now) const {
  if (disabled_ || shutdown_ <= Clock::duration::zero()) return false;
  for (const auto& w : waiting) {
    if (now - w.since >= shutdown_) return true;
  }
  return false;
}

}  // namespace ronde::runtime
