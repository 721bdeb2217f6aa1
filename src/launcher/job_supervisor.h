// Runs one job's workers to the end: starts them, streams their output, watches their exits
// and the launcher's signals, and stops everything when one fails or the user interrupts.
//
// Policy, in one place:
//  - a worker that exits non-zero or by a signal fails the job: it is reported with its rank,
//    host and status, the others are stopped, and the launcher exits with that worker's code
//    (128 + signal when killed);
//  - SIGINT/SIGTERM/SIGHUP stop every worker; a second one kills at once; exit 128 + signal;
//  - stopping is SIGTERM to each local worker's process group (for remote workers: closing
//    ssh's stdin, which makes the remote wrapper stop the worker), then SIGKILL after the
//    grace period;
//  - when a worker's main process exits, whatever it left in its process group is sent
//    SIGTERM; when the job ends, SIGKILL.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launcher/host_list.h"
#include "launcher/output_streamer.h"
#include "launcher/process_group.h"
#include "launcher/signal_watcher.h"

namespace ronde::launcher {

struct WorkerLaunch {
  RankPlacement placement;
  bool remote = false;  // started through ssh; `request` runs the ssh client
  SpawnRequest request;
  std::string stdin_data;  // written to the child's stdin pipe right after it starts
};

struct SupervisorOptions {
  std::chrono::milliseconds grace{5000};  // from SIGTERM (or stdin closed) to SIGKILL
  bool verbose = false;
};

class JobSupervisor {
 public:
  JobSupervisor(SignalWatcher& signals, OutputStreamer& output, SupervisorOptions options);
  JobSupervisor(const JobSupervisor&) = delete;
  JobSupervisor& operator=(const JobSupervisor&) = delete;

  // Starts every worker and returns the launcher's exit code once all have ended.
  int run(std::vector<WorkerLaunch> launches);

 private:
  struct Worker {
    WorkerLaunch launch;
    std::unique_ptr<ChildProcess> child;
  };

  bool startAll(std::vector<WorkerLaunch>& launches);
  void reap();
  void onSignals();
  void beginStop();
  void killRemaining();
  void drainOutput();
  std::string describe(const Worker& worker) const;
  size_t runningCount() const;

  SignalWatcher& signals_;
  OutputStreamer& output_;
  SupervisorOptions options_;
  std::vector<Worker> workers_;

  bool stopping_ = false;
  bool killed_ = false;
  std::chrono::steady_clock::time_point kill_deadline_;
  int exit_code_ = 0;
};

}  // namespace ronde::launcher
