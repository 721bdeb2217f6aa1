// Host discovery for elastic jobs: the user's script prints the hosts that may run workers,
// one per line, "host" or "host:slots" (horovodrun's format), and is run again every second.
//
// A run that fails in any way (missing or not executable script, non-zero exit, no answer
// within the timeout, a malformed line) yields an error naming the script (and the line),
// and the driver keeps the hosts it has.
//
// Thread rules: one thread (the driver's poll loop) uses a DiscoveryRun.
#pragma once

#include <poll.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/host_list.h"
#include "launcher/process_group.h"

namespace ronde::launcher {

// Parses a discovery script's output. Blank lines and '#' comments are skipped; a repeated
// host is an error, as is anything that is not "host" or "host:N" with N >= 1.
std::vector<HostSlots> parseDiscoveryOutput(const std::string& output, const std::string& script,
                                            int default_slots);

// The script is a file that exists and is executable: Error(kInvalidArgument) otherwise.
void checkDiscoveryScript(const std::string& script);

struct DiscoveryResult {
  bool ok = false;
  std::vector<HostSlots> hosts;  // when ok
  std::string error;             // when not
};

// One run of the script, read without blocking the caller.
class DiscoveryRun {
 public:
  DiscoveryRun(const std::string& script, std::vector<std::string> environment, int default_slots,
               std::chrono::milliseconds timeout);
  DiscoveryRun(const DiscoveryRun&) = delete;
  DiscoveryRun& operator=(const DiscoveryRun&) = delete;
  ~DiscoveryRun();

  // The script's stdout while it is open (-1 afterwards), for the caller's poll().
  int fd() const { return stdout_.get(); }
  // Reads what is there; returns the result once the script exited (or was killed at the
  // timeout), nothing while it still runs.
  std::optional<DiscoveryResult> poll();

 private:
  std::string script_;
  int default_slots_;
  std::chrono::steady_clock::time_point deadline_;
  std::unique_ptr<ChildProcess> child_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  std::string output_;
  std::string errors_;
  std::optional<DiscoveryResult> failed_to_start_;
};

}  // namespace ronde::launcher
