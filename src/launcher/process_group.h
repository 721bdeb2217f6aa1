// A child process started in its own process group, with its output on pipes.
//
// Signals go to the whole group, so a worker's own children (a shell's pipeline, a data
// loader) stop with it. Each child also gets PR_SET_PDEATHSIG=SIGKILL: if the launcher dies
// without cleaning up (kill -9), its direct children do not live on.
//
// Thread rules: a ChildProcess belongs to the thread that spawned it; the launcher's signal
// handling is a SignalWatcher (signal_watcher.h), so children reset the signal mask on exec.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace ronde::launcher {

struct SpawnRequest {
  std::vector<std::string> argv;         // argv[0] is looked up in the PATH of `environment`
  std::vector<std::string> environment;  // "NAME=value" entries, the child's whole environment
  bool stdin_pipe = false;               // a pipe the parent writes to; otherwise /dev/null
  std::vector<int> cpus;                 // CPUs the child is bound to (empty: not bound)
};

class ChildProcess {
 public:
  // Starts the child. Throws Error(kInvalidArgument) when argv[0] cannot be found or executed,
  // Error(kIo) when the system refuses a pipe or fork.
  static ChildProcess spawn(const SpawnRequest& request);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // A child still running is killed (its whole group) and reaped: no orphans on any path.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // The read ends of the child's stdout and stderr; the caller takes ownership.
  UniqueFd takeStdout() { return std::move(stdout_); }
  UniqueFd takeStderr() { return std::move(stderr_); }

  // Writes all of `data` to the child's stdin pipe; false if the child closed it.
  bool writeStdin(const std::string& data);
  void closeStdin() { stdin_.reset(); }

  // Reaps the child if it has exited; true once it has. Never blocks.
  bool poll();
  bool exited() const { return exited_; }
  int waitStatus() const { return status_; }  // as from waitpid; valid once exited()

  // Sends `signal` to the child's process group (also after the leader exited, to reach
  // what it left behind). Quietly does nothing when the group is gone.
  void signalGroup(int signal) const;

 private:
  ChildProcess() = default;

  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  UniqueFd stdin_;
  UniqueFd stdout_;
  UniqueFd stderr_;
};

// "exited with code 3" or "killed by signal 9 (Killed)".
std::string describeWaitStatus(int status);
// The launcher's exit code for a failed worker: its exit code, or 128 + the signal.
int exitCodeForWaitStatus(int status);
// The full path of `name` on `search_path` (a PATH value); names with a '/' are kept as they
// are. Empty when nothing executable is found.
std::string findExecutable(const std::string& name, const std::string& search_path);

}  // namespace ronde::launcher
