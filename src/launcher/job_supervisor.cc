#include "launcher/job_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "launcher/launcher_messages.h"
#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// ssh reports the remote status as its own exit code: 255 is ssh failing, and shells write
// a death by signal as 128 + signal.
std::string describeRemoteStatus(int status) {
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (code == 255) return "lost its ssh connection (ssh exited with code 255)";
    if (code > 128 && code < 128 + NSIG) {
      int sig = code - 128;
      return "killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
    }
  }
  return describeWaitStatus(status);
}

std::string signalName(int sig) {
  const char* abbreviation = ::sigabbrev_np(sig);
  return abbreviation ? std::string("SIG") + abbreviation : "signal " + std::to_string(sig);
}

}  // namespace

JobSupervisor::JobSupervisor(SignalWatcher& signals, OutputStreamer& output,
                             SupervisorOptions options)
    : signals_(signals), output_(output), options_(options) {}

int JobSupervisor::run(std::vector<WorkerLaunch> launches) {
  if (!startAll(launches)) {
    beginStop();
  }
  while (true) {
    std::vector<pollfd> fds;
    size_t streams = output_.appendPollFds(&fds);
    fds.push_back({signals_.fd(), POLLIN, 0});
    int ready = ::poll(fds.data(), fds.size(), 100);
    if (ready < 0 && errno != EINTR) {
      throw makeError(ErrorCode::kIo, "poll: ", std::strerror(errno));
    }
    if (ready > 0) output_.handle(fds.data(), streams);
    onSignals();
    reap();
    if (runningCount() == 0) break;
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) killRemaining();
  }
  drainOutput();
  // Whatever a worker left behind in its process group does not outlive the job.
  for (Worker& worker : workers_) worker.child->signalGroup(SIGKILL);
  return exit_code_;
}

bool JobSupervisor::startAll(std::vector<WorkerLaunch>& launches) {
  for (WorkerLaunch& launch : launches) {
    Worker worker{std::move(launch), nullptr};
    try {
      worker.child = std::make_unique<ChildProcess>(ChildProcess::spawn(worker.launch.request));
    } catch (const Error& error) {
      report("cannot start rank ", worker.launch.placement.rank, " on host ",
             worker.launch.placement.host, ": ", error.what());
      exit_code_ = 127;
      return false;
    }
    if (!worker.launch.stdin_data.empty()) worker.child->writeStdin(worker.launch.stdin_data);
    int rank = worker.launch.placement.rank;
    output_.add(rank, StreamKind::kStdout, worker.child->takeStdout());
    output_.add(rank, StreamKind::kStderr, worker.child->takeStderr());
    workers_.push_back(std::move(worker));
  }
  return true;
}

void JobSupervisor::reap() {
  for (Worker& worker : workers_) {
    if (worker.child->exited() || !worker.child->poll()) continue;
    worker.child->signalGroup(SIGTERM);  // its leftovers, if any
    worker.child->closeStdin();
    int status = worker.child->waitStatus();
    if (options_.verbose) report(describe(worker));
    bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (failed && !stopping_) {
      report(describe(worker));
      exit_code_ = exitCodeForWaitStatus(status);
      size_t others = runningCount();
      if (others > 0) {
        report("stopping the other ", others, " rank", others == 1 ? "" : "s");
      }
      beginStop();
    }
  }
}

void JobSupervisor::onSignals() {
  for (int sig : signals_.drain()) {
    if (sig == SIGCHLD) continue;
    if (!stopping_) {
      report("received ", signalName(sig), ", stopping ", runningCount(), " rank",
             runningCount() == 1 ? "" : "s");
      exit_code_ = 128 + sig;
      beginStop();
    } else if (!killed_) {
      report("received ", signalName(sig), " again, killing every rank now");
      killRemaining();
    }
  }
}

void JobSupervisor::beginStop() {
  if (stopping_) return;
  stopping_ = true;
  kill_deadline_ = Clock::now() + options_.grace;
  for (Worker& worker : workers_) {
    if (worker.child->exited()) continue;
    if (worker.launch.remote) {
      worker.child->closeStdin();  // the remote wrapper stops the worker and exits
    } else {
      worker.child->signalGroup(SIGTERM);
    }
  }
}

void JobSupervisor::killRemaining() {
  killed_ = true;
  for (Worker& worker : workers_) {
    if (!worker.child->exited()) worker.child->signalGroup(SIGKILL);
  }
}

void JobSupervisor::drainOutput() {
  // Output a worker wrote just before exiting is still in the pipes; read it out, but do not
  // wait forever on a descendant that escaped the process group and holds a pipe open.
  auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!output_.allClosed() && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    size_t streams = output_.appendPollFds(&fds);
    int ready = ::poll(fds.data(), fds.size(), 50);
    if (ready > 0) output_.handle(fds.data(), streams);
  }
  output_.flushAll();
}

std::string JobSupervisor::describe(const Worker& worker) const {
  std::ostringstream out;
  int status = worker.child->waitStatus();
  out << "rank " << worker.launch.placement.rank << " on host " << worker.launch.placement.host
      << " " << (worker.launch.remote ? describeRemoteStatus(status) : describeWaitStatus(status));
  return out.str();
}

size_t JobSupervisor::runningCount() const {
  size_t running = 0;
  for (const Worker& worker : workers_) {
    if (!worker.child->exited()) ++running;
  }
  return running;
}

}  // namespace ronde::launcher
