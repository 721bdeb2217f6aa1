// Starting workers on other hosts over ssh, and checking first that every host answers.
//
// The remote side runs a small POSIX sh wrapper (remoteWorkerCommand) that
//  - reads the job secret from stdin, so it never shows in a command line (`ps`);
//  - starts the worker in its own session (setsid), with the environment given by `env`;
//  - stops the worker's whole process group when its stdin reaches end of file: the launcher
//    closing the pipe, or the ssh connection dying with the launcher, stops the worker;
//  - exits with the worker's status (128 + signal when killed), which ssh hands back.
#pragma once

#include <string>
#include <vector>

#include "launcher/signal_watcher.h"
#include "launcher/worker_env.h"

namespace ronde::launcher {

struct SshOptions {
  int port = 0;                      // 0: ssh's default
  std::string identity_file;         // empty: ssh's default
  std::vector<std::string> options;  // extra "-o" options, e.g. "UserKnownHostsFile=/dev/null"
  int connect_timeout_seconds = 10;
};

// Quotes `text` for a POSIX shell: 'it'\''s'.
std::string shellQuote(const std::string& text);

// argv of the ssh client running `remote_command` on `host` (non-interactive, no tty).
std::vector<std::string> sshArgv(const SshOptions& options, const std::string& host,
                                 const std::string& remote_command);

// The remote command line for one worker: cd to `directory`, then run the wrapper described
// above with `env` set and `command` as the worker. RONDE_SECRET in `env` is left out: the
// caller writes remoteStdinPreamble() to ssh's stdin instead. Non-empty `cpus` bind the
// worker there with taskset.
std::string remoteWorkerCommand(const std::string& directory, const EnvList& env,
                                const std::vector<std::string>& command,
                                const std::vector<int>& cpus = {});
std::string remoteStdinPreamble(const std::string& secret);

struct SshProbeResult {
  std::string host;
  bool reachable = false;
  std::string error;           // ssh's own words when not reachable
  std::string client_address;  // this machine's address as the host saw it ($SSH_CONNECTION)
  std::string topology;        // the host's CPUs, as cpuTopologyCommand() prints them
};

// Runs `ssh host` on every host at once and waits for all (at most the connect timeout plus
// a little). SIGINT, SIGTERM or SIGHUP on `signals` abort the wait with Error(kAborted).
std::vector<SshProbeResult> probeHosts(const std::vector<std::string>& hosts,
                                       const SshOptions& options, SignalWatcher& signals);

}  // namespace ronde::launcher
