#include "runtime/stall_reporter.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"

namespace ronde::runtime {

StallReporter::StallReporter(double check_seconds, const Communicator& comm)
    : inspector_(check_seconds, 0, false),
      check_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(check_seconds))),
      comm_(comm) {
  thread_ = std::thread([this] { loop(); });
}

StallReporter::~StallReporter() { stop(); }

void StallReporter::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StallReporter::publish(std::vector<NegotiationTable::Waiting> waiting) {
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_ = std::move(waiting);
}

void StallReporter::cycleStarted(Clock::time_point at) {
  cycle_started_.store(at.time_since_epoch().count(), std::memory_order_relaxed);
}

void StallReporter::loop() {
  // A quarter of the check time, so a report is at most that late; at most 1 s apart, which
  // costs nothing measurable.
  const auto period = std::clamp<Clock::duration>(check_ / 4, std::chrono::milliseconds(10),
                                                  std::chrono::seconds(1));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (wake_.wait_for(lock, period, [this] { return stop_; })) return;
    if (waiting_.empty()) continue;
    std::vector<NegotiationTable::Waiting> waiting = waiting_;
    lock.unlock();
    const auto now = Clock::now();
    std::string report = inspector_.inspect(waiting, comm_, now);
    if (!report.empty()) {
      const Clock::time_point started{
          Clock::duration(cycle_started_.load(std::memory_order_relaxed))};
      if (now - started >= check_) {
        std::ostringstream note;
        note << "\n  (rank " << comm_.rank() << "'s background thread has been in one cycle for "
             << std::chrono::duration_cast<std::chrono::milliseconds>(now - started).count() /
                    1000.0
             << " s: blocked in a collective, waiting for a peer)";
        report += note.str();
      }
      log(LogLevel::kWarning, report);
    }
    lock.lock();
  }
}

}  // namespace ronde::runtime
