#include "launcher/ssh.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <memory>
#include <sstream>

#include "launcher/cpu_binding.h"
#include "launcher/process_group.h"
#include "ronde/errors.h"

extern char** environ;

namespace ronde::launcher {
namespace {

// The remote wrapper; $@ is the worker command (starting with `env NAME=value ...`).
// fd 3 keeps the ssh channel's stdin for the watcher; everything else gets /dev/null.
constexpr const char* kRemoteWrapper = R"SH(exec 3<&0 0</dev/null
IFS= read -r RONDE_SECRET <&3 || exit 125
export RONDE_SECRET
if command -v setsid >/dev/null 2>&1; then setsid "$@" 3<&- & else "$@" 3<&- & fi
w=$!
stop() { kill -s "$1" -- "-$w" 2>/dev/null || kill -s "$1" "$w" 2>/dev/null; }
(while read -r _; do :; done
 stop TERM; i=0
 while [ $i -lt 40 ] && kill -s 0 -- "-$w" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
 stop KILL) <&3 >/dev/null 2>&1 &
m=$!
exec 3<&-
wait "$w"; rc=$?
stop TERM
kill "$m" 2>/dev/null
exit $rc)SH";

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

}  // namespace

std::string shellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::vector<std::string> sshArgv(const SshOptions& options, const std::string& host,
                                 const std::string& remote_command) {
  std::vector<std::string> argv = {
      "ssh", "-T",
      "-o",  "BatchMode=yes",
      "-o",  "StrictHostKeyChecking=no",
      "-o",  "LogLevel=ERROR",
      "-o",  "ConnectTimeout=" + std::to_string(options.connect_timeout_seconds)};
  if (options.port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(options.port));
  }
  if (!options.identity_file.empty()) {
    argv.push_back("-i");
    argv.push_back(options.identity_file);
  }
  for (const std::string& option : options.options) {
    argv.push_back("-o");
    argv.push_back(option);
  }
  argv.push_back("--");
  argv.push_back(host);
  argv.push_back(remote_command);
  return argv;
}

std::string remoteWorkerCommand(const std::string& directory, const EnvList& env,
                                const std::vector<std::string>& command,
                                const std::vector<int>& cpus) {
  std::ostringstream out;
  out << "cd " << shellQuote(directory) << " && exec sh -c " << shellQuote(kRemoteWrapper)
      << " ronde-worker";
  if (!cpus.empty()) out << " taskset -c " << formatCpuList(cpus);
  out << " env";
  for (const auto& [name, value] : env) {
    if (name == "RONDE_SECRET") continue;
    out << ' ' << shellQuote(name + "=" + value);
  }
  for (const std::string& word : command) out << ' ' << shellQuote(word);
  return out.str();
}

std::string remoteStdinPreamble(const std::string& secret) { return secret + "\n"; }

std::vector<SshProbeResult> probeHosts(const std::vector<std::string>& hosts,
                                       const SshOptions& options, SignalWatcher& signals) {
  struct Probe {
    SshProbeResult result;
    std::unique_ptr<ChildProcess> child;
    UniqueFd out;
    UniqueFd err;
    std::string out_text;
    std::string err_text;
  };
  std::vector<Probe> probes;
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  for (const std::string& host : hosts) {
    Probe probe;
    probe.result.host = host;
    SpawnRequest request{
        sshArgv(options, host, std::string("echo \"$SSH_CONNECTION\"; ") + cpuTopologyCommand()),
        environment, false, {}};
    probe.child = std::make_unique<ChildProcess>(ChildProcess::spawn(request));
    probe.out = probe.child->takeStdout();
    probe.err = probe.child->takeStderr();
    probes.push_back(std::move(probe));
  }

  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options.connect_timeout_seconds + 5);
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Probe*, bool>> owners;  // which probe, stdout or stderr
    for (Probe& probe : probes) {
      if (probe.out) {
        fds.push_back({probe.out.get(), POLLIN, 0});
        owners.emplace_back(&probe, true);
      }
      if (probe.err) {
        fds.push_back({probe.err.get(), POLLIN, 0});
        owners.emplace_back(&probe, false);
      }
    }
    if (fds.empty()) break;
    fds.push_back({signals.fd(), POLLIN, 0});
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if ((fds.back().revents & POLLIN) != 0) {
      for (int sig : signals.drain()) {
        if (sig != SIGCHLD) throw Error(ErrorCode::kAborted, "interrupted while checking hosts");
      }
    }
    for (size_t i = 0; i < owners.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      auto& [probe, is_out] = owners[i];
      UniqueFd& fd = is_out ? probe->out : probe->err;
      std::string& text = is_out ? probe->out_text : probe->err_text;
      char buffer[4096];
      ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
      if (got <= 0 && !(got < 0 && errno == EINTR)) {
        fd.reset();
      } else if (got > 0) {
        text.append(buffer, static_cast<size_t>(got));
      }
    }
  }

  std::vector<SshProbeResult> results;
  for (Probe& probe : probes) {
    // Output closed; the exit follows at once, unless the deadline cut the wait short.
    for (int i = 0; i < 100 && !probe.child->poll(); ++i) ::usleep(10000);
    SshProbeResult& result = probe.result;
    if (!probe.child->exited()) {
      result.error =
          "no answer within " + std::to_string(options.connect_timeout_seconds + 5) + " seconds";
    } else if (probe.child->waitStatus() != 0) {
      result.error = trimmed(probe.err_text);
      if (result.error.empty()) {
        result.error = "ssh " + describeWaitStatus(probe.child->waitStatus());
      }
    } else {
      result.reachable = true;
      std::istringstream words(probe.out_text.substr(0, probe.out_text.find('\n')));
      words >> result.client_address;
      result.topology = probe.out_text;
    }
    results.push_back(result);
  }
  return results;
}

}  // namespace ronde::launcher
