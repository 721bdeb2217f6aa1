#include "launcher/mpi_launch.h"

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "launcher/launcher_messages.h"
#include "launcher/process_group.h"
#include "launcher/signal_watcher.h"
#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

// Horovod's choices for OpenMPI (horovod/runner/mpi_run.py): its MCA flags, and no binding
// unless --binding-args says otherwise. Hydra gets no MCA flags and always the default binding.
const std::vector<std::string> kOpenMpiFlags = {"-mca", "pml", "ob1", "-mca", "btl", "^openib"};
const std::vector<std::string> kDefaultBinding = {"-bind-to", "none", "-map-by", "slot"};

std::string commandOutput(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return output;
  }
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  *status = ::pclose(pipe);
  return output;
}

void append(std::vector<std::string>* argv, const std::vector<std::string>& words) {
  argv->insert(argv->end(), words.begin(), words.end());
}

}  // namespace

MpiFlavour detectMpiFlavour() {
  const char* path = std::getenv("PATH");
  if (findExecutable("mpirun", path != nullptr ? path : "").empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "--mpi: mpirun is not on PATH (install OpenMPI or MPICH, or drop --mpi)");
  }
  int status = 0;
  const std::string output = commandOutput("mpirun --version 2>&1", &status);
  if (status != 0) {
    throw makeError(ErrorCode::kInvalidArgument, "--mpi: `mpirun --version` failed: ", output);
  }
  if (output.find("Open MPI") != std::string::npos || output.find("OpenRTE") != std::string::npos) {
    return MpiFlavour::kOpenMpi;
  }
  for (const char* hydra : {"HYDRA", "MPICH", "Intel(R) MPI"}) {
    if (output.find(hydra) != std::string::npos) return MpiFlavour::kHydra;
  }
  throw makeError(ErrorCode::kInvalidArgument,
                  "--mpi: `mpirun --version` names neither OpenMPI nor MPICH/Intel MPI: ", output);
}

std::vector<std::string> splitShellWords(const std::string& text, const std::string& flag) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = '\0';
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '\'') {
      if (c == '\'') {
        quote = '\0';
      } else {
        word += c;
      }
    } else if (c == '\\' && i + 1 < text.size() &&
               (quote == '\0' || std::strchr("\"\\$`", text[i + 1]) != nullptr)) {
      word += text[++i];
      in_word = true;
    } else if (quote == '"') {
      if (c == '"') {
        quote = '\0';
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != '\0') {
    throw makeError(ErrorCode::kInvalidArgument, flag, " '", text, "': unclosed ", quote);
  }
  if (in_word) words.push_back(word);
  return words;
}

EnvList sharedVariables(const std::vector<MpiRank>& ranks) {
  EnvList shared;
  if (ranks.empty()) return shared;
  std::vector<std::map<std::string, std::string>> by_rank;
  for (const MpiRank& rank : ranks) {
    by_rank.emplace_back(rank.variables.begin(), rank.variables.end());
  }
  for (const auto& [name, value] : ranks.front().variables) {
    const bool same = std::all_of(by_rank.begin(), by_rank.end(), [&](const auto& own) {
      auto found = own.find(name);
      return found != own.end() && found->second == value;
    });
    if (same) shared.emplace_back(name, value);
  }
  return shared;
}

EnvList exportedVariables(char* const* environ, const EnvList& shared) {
  EnvList exported = shared;
  std::map<std::string, std::string> known(shared.begin(), shared.end());
  for (char* const* entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const size_t equals = text.find('=');
    if (equals == std::string::npos) continue;
    const std::string name = text.substr(0, equals);
    const bool ignored = name == "OLDPWD" || name.rfind("BASH_FUNC_", 0) == 0 ||
                         name.find("CUDA_VISIBLE_DEVICES") != std::string::npos;
    if (ignored || !isValidVariableName(name) || known.count(name) != 0) continue;
    known[name] = text.substr(equals + 1);
    exported.emplace_back(name, known[name]);
  }
  return exported;
}

namespace {

// The arguments mpirun gives ssh: ronde's own defaults (ssh.cc: no prompt, no host key check)
// when ranks are on other hosts, then -p, -i and --ssh-option's.
std::string sshArgs(const MpirunOptions& options) {
  std::vector<std::string> words;
  if (options.remote_hosts) {
    append(&words, {"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"});
  }
  if (options.ssh_port > 0) append(&words, {"-p", std::to_string(options.ssh_port)});
  if (!options.ssh_identity_file.empty()) append(&words, {"-i", options.ssh_identity_file});
  for (const std::string& option : options.ssh_options) append(&words, {"-o", option});
  std::string joined;
  for (const std::string& word : words) joined += (joined.empty() ? "" : " ") + word;
  return joined;
}

// Options of the whole mpirun, before the first context.
std::vector<std::string> globalArgs(const MpirunOptions& options, const EnvList& shared) {
  const bool open_mpi = options.flavour == MpiFlavour::kOpenMpi;
  std::vector<std::string> argv = {"mpirun"};
  if (open_mpi) {
    if (options.as_root) argv.push_back("--allow-run-as-root");
    argv.push_back("--tag-output");
    append(&argv, kOpenMpiFlags);
    if (options.prefix_timestamp) argv.push_back("--timestamp-output");
    if (options.report_bindings) argv.push_back("--report-bindings");
  } else {
    argv.push_back("-l");
  }
  if (open_mpi && !options.network_interface.empty()) {
    // As horovodrun's --network-interface: an interface name, or this address alone.
    in_addr address;
    const bool is_address = ::inet_pton(AF_INET, options.network_interface.c_str(), &address) == 1;
    append(&argv, {"-mca", "btl_tcp_if_include",
                   options.network_interface + (is_address ? "/32" : "")});
  }
  const std::string ssh = sshArgs(options);
  if (!ssh.empty() && open_mpi) append(&argv, {"-mca", "plm_rsh_args", ssh});
  if (!ssh.empty() && !open_mpi) append(&argv, {"-bootstrap=ssh", "-bootstrap-exec-args", ssh});
  if (!options.output_directory.empty()) {
    append(&argv, {open_mpi ? "--output-filename" : "-outfile-pattern", options.output_directory});
  }
  if (!open_mpi && !shared.empty()) {
    std::string names;
    for (const auto& entry : shared) names += (names.empty() ? "" : ",") + entry.first;
    append(&argv, {"-genvlist", names});
  }
  return argv;
}

// One rank's application context: where it runs, its binding, the user's --mpi-args (OpenMPI
// takes -x and binding per context), its own variables and the command.
void appendContext(const MpirunOptions& options, const MpiRank& rank, const EnvList& shared,
                   std::vector<std::string>* argv) {
  std::map<std::string, std::string> common(shared.begin(), shared.end());
  if (options.flavour == MpiFlavour::kOpenMpi) {
    append(argv, {"-np", "1", "-H", rank.host + ":" + std::to_string(rank.host_slots)});
    append(argv, options.binding_args.empty() ? kDefaultBinding : options.binding_args);
    for (const auto& entry : shared) append(argv, {"-x", entry.first});
    for (const auto& [name, value] : rank.variables) {
      if (common.count(name) == 0) append(argv, {"-x", name + "=" + value});
    }
  } else {
    append(argv, {"-n", "1", "-host", rank.host});
    append(argv, kDefaultBinding);
    for (const auto& [name, value] : rank.variables) {
      if (common.count(name) == 0) append(argv, {"-env", name, value});
    }
  }
  append(argv, options.mpi_args);
  append(argv, options.command);
}

}  // namespace

std::vector<std::string> mpirunArgv(const MpirunOptions& options,
                                    const std::vector<MpiRank>& ranks, const EnvList& shared) {
  std::vector<std::string> argv = globalArgs(options, shared);
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) argv.push_back(":");
    appendContext(options, ranks[i], shared, &argv);
  }
  return argv;
}

namespace {

void copyOut(int from, int to, bool* open) {
  char buffer[65536];
  ssize_t got = ::read(from, buffer, sizeof(buffer));
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (got <= 0) {
    *open = false;
    return;
  }
  for (ssize_t done = 0; done < got;) {
    ssize_t wrote = ::write(to, buffer + done, static_cast<size_t>(got - done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return;  // our own output is gone; keep draining the child's
    done += wrote;
  }
}

}  // namespace

int runMpirun(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
              SignalWatcher& signals) {
  ChildProcess mpirun = ChildProcess::spawn({argv, environment, false, {}});
  UniqueFd out = mpirun.takeStdout();
  UniqueFd err = mpirun.takeStderr();
  bool out_open = true;
  bool err_open = true;
  int received = 0;  // the first signal passed on to mpirun
  // Output that what mpirun left behind holds open is read for 2 s more at most.
  auto drain_until = std::chrono::steady_clock::time_point::max();
  while ((out_open || err_open || !mpirun.exited()) &&
         std::chrono::steady_clock::now() < drain_until) {
    pollfd fds[3] = {{signals.fd(), POLLIN, 0},
                     {out_open ? out.get() : -1, POLLIN, 0},
                     {err_open ? err.get() : -1, POLLIN, 0}};
    if (::poll(fds, 3, mpirun.exited() ? 100 : 1000) < 0 && errno != EINTR) {
      throw makeError(ErrorCode::kIo, "poll: ", std::strerror(errno));
    }
    if (fds[0].revents != 0) {
      for (int sig : signals.drain()) {
        // mpirun stops its ranks itself; a second Ctrl-C makes it stop them at once.
        if (sig == SIGCHLD) continue;
        if (received == 0) received = sig;
        mpirun.signalGroup(sig);
      }
    }
    if (out_open && fds[1].revents != 0) copyOut(out.get(), 1, &out_open);
    if (err_open && fds[2].revents != 0) copyOut(err.get(), 2, &err_open);
    if (!mpirun.exited() && mpirun.poll()) {
      drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    }
  }
  const int status = mpirun.waitStatus();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  report("mpirun ", describeWaitStatus(status));
  // Stopped on the user's signal: exit as `ronde run` without --mpi does, 128 + the signal.
  return received != 0 ? 128 + received : exitCodeForWaitStatus(status);
}

}  // namespace ronde::launcher
