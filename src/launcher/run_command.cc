// `ronde run`: from parsed options to a running job.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "launcher/cpu_binding.h"
#include "launcher/elastic_driver.h"
#include "launcher/host_list.h"
#include "launcher/job_secret.h"
#include "launcher/job_supervisor.h"
#include "launcher/launcher_messages.h"
#include "launcher/mpi_launch.h"
#include "launcher/network_address.h"
#include "launcher/output_streamer.h"
#include "launcher/process_group.h"
#include "launcher/run_options.h"
#include "launcher/signal_watcher.h"
#include "launcher/ssh.h"
#include "launcher/worker_env.h"
#include "launcher/worker_settings_check.h"
#include "ronde/errors.h"
#include "ronde/settings.h"
#include "ronde/store.h"

extern char** environ;

namespace ronde::launcher {
namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitUnreachable = 1;

// "user@host" names the ssh login; the host is the part after '@'.
std::string hostPart(const std::string& host) { return host.substr(host.find('@') + 1); }

std::string currentDirectory() {
  char buffer[4096];
  if (::getcwd(buffer, sizeof(buffer)) == nullptr) {
    throw makeError(ErrorCode::kIo, "getcwd: ", std::strerror(errno));
  }
  return buffer;
}

std::vector<std::string> currentEnvironment() {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  return environment;
}

// Every setting the workers will read, checked now: a bad RONDE_*/HOROVOD_* value then stops
// the launch with one line instead of failing inside every worker a few seconds later.
// The workers' variables (flags, -x) come first, then the launcher's own environment.
// Rank 0 writes the timeline and the autotune log: their folders are checked where it runs here.
void checkWorkerSettings(const RunOptions& options, const EnvList& passed,
                         const RankPlacement& first) {
  JobEnvironment job;
  job.secret = "unused";
  job.network_interface = options.network_interface;
  job.settings = options.settings;
  job.passed = passed;
  const EnvList variables = workerVariables(first, "localhost", "127.0.0.1:1", job);
  const Settings settings = checkJobSettings(variables);
  if (isLocalHost(hostPart(first.host))) checkOutputFolders(settings);
}

// --min-np and --max-np bound an elastic job; without a discovery script there is none.
void checkElasticOnlyFlags(const RunOptions& options) {
  if (options.elastic.min_np > 0 || options.elastic.max_np > 0) {
    throw makeError(ErrorCode::kInvalidArgument,
                    options.elastic.min_np > 0 ? "--min-np" : "--max-np",
                    " bounds an elastic job: give --host-discovery-script too");
  }
}

// A local worker's command that cannot be found is bad input like any other (exit 2), said
// once before anything starts, not as every rank's exit 127.
void checkLocalCommand(const std::vector<std::string>& command) {
  const char* path = std::getenv("PATH");
  if (!findExecutable(command[0], path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin")
           .empty()) {
    return;
  }
  throw makeError(ErrorCode::kInvalidArgument, command[0],
                  command[0].find('/') == std::string::npos ? ": command not found on PATH"
                                                            : ": no such executable file");
}

struct HostPlan {
  bool local = false;
  std::string hostname;       // RONDE_HOSTNAME
  std::string store_address;  // the launcher's address as this host reaches it (no port)
};

struct StoreAddresses {
  std::string bind_address;
  std::map<std::string, std::string> per_host;  // host -> address workers there connect to
};

// Local-only jobs meet on loopback. With remote hosts each host gets the address of this
// machine on the route toward it (or the one --network-interface names); the store listens
// on that address, or on all of them when hosts are reached through different ones.
StoreAddresses chooseStoreAddresses(const std::vector<std::string>& hosts,
                                    const std::map<std::string, bool>& is_local,
                                    const std::map<std::string, std::string>& seen_as,
                                    const std::string& network_interface) {
  StoreAddresses result;
  if (!network_interface.empty()) {
    result.bind_address = addressOfInterface(network_interface);
    for (const std::string& host : hosts) result.per_host[host] = result.bind_address;
    return result;
  }
  std::string first_remote;
  std::set<std::string> distinct;
  for (const std::string& host : hosts) {
    if (is_local.at(host)) continue;
    std::string address = sourceAddressToward(hostPart(host));
    if (address.empty()) {
      auto found = seen_as.find(host);
      if (found != seen_as.end()) address = found->second;
    }
    if (address.empty()) {
      throw makeError(ErrorCode::kInvalidArgument, "cannot tell which address of this machine ",
                      host, " reaches; name one with --network-interface");
    }
    result.per_host[host] = address;
    distinct.insert(address);
    if (first_remote.empty()) first_remote = address;
  }
  if (first_remote.empty()) {
    result.bind_address = "127.0.0.1";
    for (const std::string& host : hosts) result.per_host[host] = result.bind_address;
    return result;
  }
  for (const std::string& host : hosts) {
    if (is_local.at(host)) result.per_host[host] = first_remote;
  }
  result.bind_address = distinct.size() == 1 ? first_remote : "0.0.0.0";
  return result;
}

// Checks every remote host over ssh, all at once; reports each one that fails.
bool checkRemoteHosts(const std::vector<std::string>& remote_hosts, const SshOptions& ssh,
                      SignalWatcher& signals, std::map<std::string, std::string>* seen_as,
                      std::map<std::string, CpuTopology>* topologies) {
  bool all_reachable = true;
  for (const SshProbeResult& result : probeHosts(remote_hosts, ssh, signals)) {
    if (result.reachable) {
      (*seen_as)[result.host] = result.client_address;
      (*topologies)[result.host] = parseCpuTopology(result.topology);
      continue;
    }
    all_reachable = false;
    report("cannot reach host ", result.host, " over ssh: ", result.error);
  }
  return all_reachable;
}

}  // namespace

namespace {

// The hosts the command line names (-H, --hostfile, or this one) and, in *num_ranks, how many
// ranks to place on them: -np, or like mpirun one per slot without it.
std::vector<HostSlots> hostsOf(const RunOptions& options, int* num_ranks) {
  std::vector<HostSlots> hosts;
  *num_ranks = options.num_ranks_given ? options.num_ranks : 0;
  if (options.hosts_given) {
    hosts = parseHostList(options.hosts);
  } else if (options.hostfile_given) {
    hosts = readHostFile(options.hostfile);
  } else if (*num_ranks == 0) {
    throw Error(ErrorCode::kInvalidArgument, "-np is required (how many ranks to start)");
  } else {
    hosts = {{"localhost", *num_ranks}};
  }
  if (*num_ranks == 0) {
    // Like mpirun: with hosts but without -np, one rank per slot.
    for (const HostSlots& host : hosts) *num_ranks += host.slots;
  }
  return hosts;
}

// What the command line asks for, checked before anything starts: bad input throws Error.
struct JobInput {
  std::vector<RankPlacement> placements;
  EnvList passed;  // -x
  BindTo bind_to = BindTo::kAuto;
  MpiFlavour mpi_flavour = MpiFlavour::kOpenMpi;  // --mpi: the mpirun on PATH
};

// --mpi and its flags: horovodrun's, on a job ronde places itself (mpi_launch.h).
void checkMpiInput(const RunOptions& options, JobInput* input) {
  if (!options.mpi) {
    if (options.mpi_args_given || options.binding_args_given) {
      throw makeError(ErrorCode::kInvalidArgument,
                      options.mpi_args_given ? "--mpi-args" : "--binding-args",
                      " are mpirun's arguments: give --mpi too");
    }
    return;
  }
  if (options.bind_to != "auto") {
    throw makeError(ErrorCode::kInvalidArgument, "--bind-to ", options.bind_to,
                    ": with --mpi, mpirun binds the ranks; say how with --binding-args");
  }
  splitShellWords(options.mpi_args, "--mpi-args");
  splitShellWords(options.binding_args, "--binding-args");
  input->mpi_flavour = detectMpiFlavour();
}

JobInput checkJobInput(const RunOptions& options) {
  JobInput input;
  input.bind_to = parseBindTo(options.bind_to);
  if (options.command.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "no command given: ronde run -np N COMMAND ...");
  }
  checkElasticOnlyFlags(options);
  checkMpiInput(options, &input);
  if (options.hosts_given && options.hostfile_given) {
    throw Error(ErrorCode::kInvalidArgument, "give -H or --hostfile, not both");
  }
  if (options.num_ranks_given && options.num_ranks <= 0) {
    throw makeError(ErrorCode::kInvalidArgument, "-np ", options.num_ranks,
                    ": the number of ranks must be positive");
  }
  int num_ranks = 0;
  std::vector<HostSlots> hosts = hostsOf(options, &num_ranks);
  input.placements = placeRanks(hosts, num_ranks);
  input.passed = resolvePassedVariables(
      options.env_requests, [](const std::string& name) { return std::getenv(name.c_str()); });
  checkWorkerSettings(options, input.passed, input.placements.front());
  for (const RankPlacement& placement : input.placements) {
    if (isLocalHost(hostPart(placement.host))) {
      checkLocalCommand(options.command);
      break;
    }
  }
  return input;
}

// The hosts that have ranks, in order, whether each is this machine, and the others.
void hostsWithRanks(const std::vector<RankPlacement>& placements, std::vector<std::string>* hosts,
                    std::map<std::string, bool>* is_local,
                    std::vector<std::string>* remote_hosts) {
  for (const RankPlacement& placement : placements) {
    if (is_local->count(placement.host) != 0) continue;
    hosts->push_back(placement.host);
    bool local = isLocalHost(hostPart(placement.host));
    (*is_local)[placement.host] = local;
    if (!local) remote_hosts->push_back(placement.host);
  }
}

SshOptions sshOptionsOf(const RunOptions& options) {
  SshOptions ssh;
  ssh.port = options.ssh_port;
  ssh.identity_file = options.ssh_identity_file;
  ssh.options = options.ssh_options;
  ssh.connect_timeout_seconds =
      std::max(1, static_cast<int>(std::ceil(std::min(options.start_timeout_seconds, 3600.0))));
  return ssh;
}

// What every rank's launch is made from: where the ranks go and what they share.
struct LaunchPlan {
  const RunOptions* options = nullptr;
  BindTo bind_to = BindTo::kAuto;
  std::map<std::string, bool> is_local;
  std::map<std::string, CpuTopology> topologies;  // remote hosts, from the ssh probe
  CpuTopology local_topology;
  StoreAddresses addresses;
  int store_port = 0;
  JobEnvironment job;
  SshOptions ssh;
  std::string directory;                          // the workers' working directory
  std::vector<std::string> launcher_environment;  // ssh's own environment
};

// The name a rank's host goes by (RONDE_HOSTNAME): this machine's own name for "localhost".
std::string hostnameOf(const RankPlacement& placement, const LaunchPlan& plan) {
  const std::string name = hostPart(placement.host);
  const bool loopback_name = name == "localhost" || name.rfind("127.", 0) == 0;
  return plan.is_local.at(placement.host) && loopback_name ? localHostName() : name;
}

std::string storeAddressOf(const RankPlacement& placement, const LaunchPlan& plan) {
  return plan.addresses.per_host.at(placement.host) + ":" + std::to_string(plan.store_port);
}

// One rank's process: its variables, CPUs, and the command that starts it here or over ssh.
WorkerLaunch launchOf(const RankPlacement& placement, LaunchPlan& plan) {
  bool local = plan.is_local.at(placement.host);
  std::string hostname = hostnameOf(placement, plan);
  std::string store_address = storeAddressOf(placement, plan);
  EnvList variables = workerVariables(placement, hostname, store_address, plan.job);

  const CpuTopology& topology = local ? plan.local_topology : plan.topologies[placement.host];
  std::string binding_warning;
  std::vector<int> cpus = cpusForRank(plan.bind_to, placement.local_rank, placement.local_size,
                                      topology, &binding_warning);
  if (!binding_warning.empty() && placement.local_rank == 0) {
    report("--bind-to ", bindToName(plan.bind_to), " on ", hostname, ": ", binding_warning);
  }
  if (plan.options->report_bindings) {
    const BindTo shown = plan.bind_to == BindTo::kAuto ? BindTo::kCore : plan.bind_to;
    report("rank ", placement.rank, " on ", hostname, ": ",
           cpus.empty() ? std::string("not bound")
                        : "bound to CPUs " + formatCpuList(cpus) + " (--bind-to " +
                              bindToName(shown) + ")");
  }

  WorkerLaunch launch;
  launch.placement = placement;
  // Reports name the host as the ranks themselves do (RONDE_HOSTNAME): one failure, one name.
  launch.placement.host = hostname;
  launch.remote = !local;
  if (local) {
    launch.request = {plan.options->command, mergeEnvironment(environ, variables), false, cpus};
  } else {
    EnvList remote_variables = forwardedSettings(environ, variables);
    remote_variables.insert(remote_variables.end(), variables.begin(), variables.end());
    const std::string command =
        remoteWorkerCommand(plan.directory, remote_variables, plan.options->command, cpus);
    launch.request = {sshArgv(plan.ssh, placement.host, command), plan.launcher_environment, true,
                      {}};  // bound by taskset on the remote host
    launch.stdin_data = remoteStdinPreamble(plan.job.secret);
  }
  if (plan.options->verbose) {
    report("rank ", placement.rank, " on ", hostname, local ? " (local)" : " (ssh)",
           ": local rank ", placement.local_rank, "/", placement.local_size, ", cross rank ",
           placement.cross_rank, "/", placement.cross_size, ", store ", store_address,
           cpus.empty() ? std::string(", not bound") : ", CPUs " + formatCpuList(cpus));
  }
  return launch;
}

// --mpi: the same ranks with the same variables, started by mpirun instead (mpi_launch.h).
int runMpiJob(const std::vector<RankPlacement>& placements, const LaunchPlan& plan,
              MpiFlavour flavour, SignalWatcher& signals) {
  const RunOptions& options = *plan.options;
  std::vector<MpiRank> ranks;
  for (const RankPlacement& placement : placements) {
    MpiRank rank;
    rank.host = hostPart(placement.host);
    rank.host_slots = placement.local_size;
    rank.variables = workerVariables(placement, hostnameOf(placement, plan),
                                     storeAddressOf(placement, plan), plan.job);
    ranks.push_back(std::move(rank));
  }
  MpirunOptions mpirun;
  mpirun.flavour = flavour;
  mpirun.as_root = ::geteuid() == 0;
  mpirun.mpi_args = splitShellWords(options.mpi_args, "--mpi-args");
  mpirun.binding_args = splitShellWords(options.binding_args, "--binding-args");
  mpirun.output_directory = options.output_directory;
  mpirun.prefix_timestamp = options.prefix_timestamp;
  mpirun.report_bindings = options.report_bindings;
  mpirun.network_interface = options.network_interface;
  mpirun.ssh_port = options.ssh_port;
  mpirun.ssh_identity_file = options.ssh_identity_file;
  mpirun.ssh_options = options.ssh_options;
  for (const auto& [host, local] : plan.is_local) mpirun.remote_hosts |= !local;
  mpirun.command = options.command;
  const EnvList exported = exportedVariables(environ, sharedVariables(ranks));
  const std::vector<std::string> argv = mpirunArgv(mpirun, ranks, exported);
  if (options.verbose) {
    std::string line;
    for (const std::string& word : argv) line += (line.empty() ? "" : " ") + word;
    report(line);
  }
  try {
    return runMpirun(argv, mergeEnvironment(environ, exported), signals);
  } catch (const Error& error) {
    report(error.what());
    return 1;
  }
}

// --mpi on an elastic job: refused (exit 2) with the reason; 0 when there is nothing to refuse.
int refuseElasticMpi(const RunOptions& options) {
  const ElasticOptions& elastic = options.elastic;
  if (!options.mpi || (elastic.discovery_script.empty() && elastic.min_np <= 0 &&
                       elastic.max_np <= 0)) {
    return 0;
  }
  report("--mpi: an elastic job (--host-discovery-script, --min-np, --max-np) starts and "
         "restarts its workers itself; mpirun cannot, so drop --mpi");
  return kExitBadInput;
}

JobEnvironment jobEnvironmentOf(const RunOptions& options, const JobInput& input) {
  JobEnvironment job;
  job.secret = makeSecret();
  job.network_interface = options.network_interface;
  job.settings = options.settings;
  job.passed = input.passed;
  return job;
}

}  // namespace

int runJob(const RunOptions& options) {
  if (int refused = refuseElasticMpi(options)) return refused;
  if (!options.elastic.discovery_script.empty()) return runElasticJob(options);
  // Before any thread exists (the store server's), so that every thread blocks the signals.
  SignalWatcher signals;

  JobInput input;
  try {
    input = checkJobInput(options);
  } catch (const Error& error) {
    report(error.what());
    return kExitBadInput;
  }
  const std::vector<RankPlacement>& placements = input.placements;
  const BindTo bind_to = input.bind_to;

  std::vector<std::string> hosts;  // the hosts with ranks, in order
  std::map<std::string, bool> is_local;
  std::vector<std::string> remote_hosts;
  hostsWithRanks(placements, &hosts, &is_local, &remote_hosts);
  const SshOptions ssh = sshOptionsOf(options);

  std::map<std::string, std::string> seen_as;
  std::map<std::string, CpuTopology> topologies;  // remote hosts, from the ssh probe
  StoreAddresses addresses;
  try {
    if (!remote_hosts.empty() &&
        !checkRemoteHosts(remote_hosts, ssh, signals, &seen_as, &topologies)) {
      return kExitUnreachable;
    }
    addresses = chooseStoreAddresses(hosts, is_local, seen_as, options.network_interface);
  } catch (const Error& error) {
    report(error.what());
    return error.code() == ErrorCode::kAborted ? 130 : kExitBadInput;
  }

  JobEnvironment job = jobEnvironmentOf(options, input);
  std::unique_ptr<TcpStoreServer> store;
  try {
    store = std::make_unique<TcpStoreServer>(addresses.bind_address, 0, job.secret);
  } catch (const Error& error) {
    report("cannot start the rendezvous store on ", addresses.bind_address, ": ", error.what());
    return 1;
  }

  LaunchPlan plan;
  plan.options = &options;
  plan.bind_to = bind_to;
  plan.is_local = std::move(is_local);
  plan.topologies = std::move(topologies);
  plan.local_topology = localCpuTopology();
  plan.addresses = std::move(addresses);
  plan.store_port = store->port();
  plan.job = std::move(job);
  plan.ssh = ssh;
  plan.directory = currentDirectory();
  plan.launcher_environment = currentEnvironment();
  if (options.mpi) return runMpiJob(placements, plan, input.mpi_flavour, signals);
  std::vector<WorkerLaunch> launches;
  for (const RankPlacement& placement : placements) launches.push_back(launchOf(placement, plan));

  try {
    OutputStreamer output(
        {options.output_directory, options.prefix_timestamp, static_cast<int>(placements.size())});
    SupervisorOptions supervisor_options;
    supervisor_options.grace =
        std::chrono::milliseconds(static_cast<int64_t>(options.grace_seconds * 1000));
    supervisor_options.verbose = options.verbose;
    JobSupervisor supervisor(signals, output, supervisor_options);
    return supervisor.run(std::move(launches));
  } catch (const Error& error) {
    report(error.what());
    return 1;
  }
}

}  // namespace ronde::launcher
